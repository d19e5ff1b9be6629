// Package mysqlerr names the MySQL and MariaDB server error numbers idgen
// reacts to, and reads them from a driver error. It is a leaf: the worker
// lease's MySQL registry and the stores share it without the lease
// depending on the stores (internal/mysqldb imports segment and ordered).
package mysqlerr

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// MySQL/MariaDB server error numbers idgen treats specially.
const (
	DupEntry           = 1062
	NoSuchTable        = 1146
	BadField           = 1054 // unknown column (a schema older than the code)
	ParseError         = 1064 // a syntax this server does not know
	DataOutOfRange     = 1690 // BIGINT value is out of range
	LockWaitTimeout    = 1205
	LockDeadlock       = 1213
	ConCount           = 1040 // too many connections
	ServerShutdown     = 1053
	AccessDenied       = 1045
	DBAccessDenied     = 1044
	TableAccessDenied  = 1142
	ColumnAccessDenied = 1143
	BadDB              = 1049
	QueryInterrupted   = 1317
	OptionPreventsStmt = 1290 // --read-only
	ReadOnlyTxn        = 1792
	ReadOnlyMode       = 1836
	ConnectionKilled   = 1927 // MariaDB
	StatementTimeout   = 1969 // MariaDB max_statement_time
	QueryTimeout       = 3024 // MySQL max_execution_time
	ClientIdleTimeout  = 4031 // MySQL 8.0.24+: disconnected for inactivity
	NetReadError       = 1158
	NetReadInterrupted = 1159
	NetWriteError      = 1160
	NetWriteInterrupt  = 1161
	HostBlocked        = 1129
	UserLimitReached   = 1226
	UnknownComError    = 1047
	TooManyUserConns   = 1203
	LockTableFull      = 1206
	OutOfResources     = 1041
)

// Number returns the server's error number of err, 0 when err is not a
// server error.
func Number(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
