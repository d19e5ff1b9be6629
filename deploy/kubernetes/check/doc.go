// Package check validates idgen's Kubernetes manifests (deploy/kubernetes):
// every kustomization (cluster, idc1, idc2 over base) is rendered with
// kustomize's own library (sigs.k8s.io/kustomize/api, the version kubectl
// 1.34's `apply -k` embeds, pinned in go.mod: no kustomize or kubectl
// binary is needed), every document is decoded strictly into the
// Kubernetes type of its kind, and the properties idgen depends on are
// checked: each IDC alone (Check), the IDCs together and the init Job
// against them (CheckCluster). Run by go test ./... It is a module of its
// own so that the service's module does not depend on the Kubernetes API
// packages.
package check
