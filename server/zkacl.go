package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// warnOpenZooKeeper says, at start and in idgen_zookeeper_acl_open, when
// the cluster's znodes carry no ACL: without zk_auth anyone who reaches
// ZooKeeper can read the businesses (and their keys, unless a master key
// wraps them) and rewrite the worker high-water marks that keep SNOWFLAKE
// IDs unique.
func warnOpenZooKeeper(cfg Config, m *metrics, log *zap.Logger) {
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "idgen_zookeeper_acl_open",
		Help: "1 when this node runs with ZooKeeper but without zk_auth: the cluster's znodes are world-readable and writable."})
	m.reg.MustRegister(open)
	if cfg.ZKAuth != "" {
		return
	}
	open.Set(1)
	log.Warn("ZooKeeper without zk_auth: every znode of the cluster is world-readable and writable (worker high-water marks, businesses, keys not wrapped by a master key)",
		zap.String("fix", "give every node and idctl the same --zk-auth-file (user:password, mode 0600); see docs/security.md"))
}

// warnUnwitnessedZooKeeper exports idgen_zookeeper_single_server_unwitnessed
// and logs at error level when the node runs on one ZooKeeper server
// without --mysql because --zk-single-server-unwitnessed accepted it:
// nothing outside that server witnesses its history, so a restore of it
// from an older copy is not seen by a node that starts first after it
// (issue 29 hole h; Config.Validate refuses the configuration otherwise).
func warnUnwitnessedZooKeeper(cfg Config, m *metrics, log *zap.Logger) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "idgen_zookeeper_single_server_unwitnessed",
		Help: "1 when this node runs with a single ZooKeeper server and no MySQL (--zk-single-server-unwitnessed): a restore of that server from an older copy is not seen by a node that starts first after it, and IDs may repeat."})
	m.reg.MustRegister(g)
	if cfg.MySQL != "" || zkServerCount(cfg.ZK) != 1 || !cfg.ZKSingleServerUnwitnessed {
		return
	}
	g.Set(1)
	log.Error("a single ZooKeeper server without MySQL, accepted by --"+ZKSingleServerUnwitnessedOpt+": if that server is restored from an older copy, a node that starts first cannot tell and IDs may repeat",
		zap.String("zk", cfg.ZK),
		zap.String("fix", "list a ZooKeeper ensemble (three or more servers) or add --mysql; until then restore ZooKeeper only with `idctl cluster restore`, every node stopped"))
}
