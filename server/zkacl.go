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
