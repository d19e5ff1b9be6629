// Package idctlenv names the environment variables idctl reads. idgen warns
// at start about an IDGEN_* variable that names none of its settings (a
// misspelt IDGEN_MSYQL would otherwise be ignored without a word); the
// variables of idctl, exported in the same shell or unit (IDGEN_ADDR,
// IDGEN_TLS_CA, ...), are not misspelt, so idgen takes this list as known
// too. It is the one list of them: idctl reads its variables by these
// names, and a test of idctl checks that every IDGEN_* name in its source
// is here.
//
// Several are also the names of idgen's own settings (IDGEN_ZK,
// IDGEN_ADMIN_TOKEN_FILE, ...): idctl reads the node's variables on
// purpose, so that what configures a node also points idctl at it.
package idctlenv

// The variables idctl reads.
const (
	Addr            = "IDGEN_ADDR"              // a node's RPC address (get, bench, biz, decode, parse)
	AdminAddr       = "IDGEN_ADMIN_ADDR"        // a node's admin HTTP address (health); idgen's admin_addr
	AdminToken      = "IDGEN_ADMIN_TOKEN"       // idgen's admin_token
	AdminTokenFile  = "IDGEN_ADMIN_TOKEN_FILE"  // idgen's admin_token_file
	ClientToken     = "IDGEN_CLIENT_TOKEN"      // idgen's client_token
	ClientTokenFile = "IDGEN_CLIENT_TOKEN_FILE" // idgen's client_token_file
	DataDir         = "IDGEN_DATA_DIR"          // where a node wrote admin.token; idgen's data_dir
	AuditFile       = "IDGEN_AUDIT_FILE"        // idgen's audit_file
	ZK              = "IDGEN_ZK"                // idgen's zk
	ZKRoot          = "IDGEN_ZK_ROOT"           // idgen's zk_root
	ZKAuth          = "IDGEN_ZK_AUTH"           // idgen's zk_auth
	ZKAuthFile      = "IDGEN_ZK_AUTH_FILE"      // idgen's zk_auth_file
	Cluster         = "IDGEN_CLUSTER"           // idgen's cluster
	Epoch           = "IDGEN_EPOCH"             // idgen's epoch
	MySQL           = "IDGEN_MYSQL"             // idgen's mysql
	MySQLFile       = "IDGEN_MYSQL_FILE"        // idgen's mysql_file
	TLSCA           = "IDGEN_TLS_CA"            // the CA that verifies a node's certificate
	TLSCert         = "IDGEN_TLS_CERT"          // idctl's client certificate (idgen reads it as its server certificate)
	TLSKey          = "IDGEN_TLS_KEY"           // the key of IDGEN_TLS_CERT
	TLSServerName   = "IDGEN_TLS_SERVER_NAME"   // the name to verify in a node's certificate

	// Token is the old name of ClientToken for get and bench, read for one
	// more release with a deprecation line.
	Token = "IDGEN_TOKEN"
)

// Names lists every variable above.
var Names = []string{Addr, AdminAddr, AdminToken, AdminTokenFile, ClientToken, ClientTokenFile, DataDir, AuditFile,
	ZK, ZKRoot, ZKAuth, ZKAuthFile, Cluster, Epoch, MySQL, MySQLFile, TLSCA, TLSCert, TLSKey, TLSServerName, Token}
