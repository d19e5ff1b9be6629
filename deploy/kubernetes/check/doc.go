// Package check validates idgen's Kubernetes manifests (deploy/kubernetes):
// every document is decoded strictly into the Kubernetes type of its kind
// and the properties idgen depends on are checked (go test ./...). It is a
// module of its own so that the service's module does not depend on the
// Kubernetes API packages.
package check
