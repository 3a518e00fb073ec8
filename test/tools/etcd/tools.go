//go:build tools

// Package tools pins go.etcd.io/etcd/server/v3, whose module root is the
// etcd main package; build-k8s.sh builds it from this module.
package tools

import _ "go.etcd.io/etcd/server/v3"
