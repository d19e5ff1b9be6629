package check

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The kustomizations of deploy/kubernetes, the parent of this module: the
// cluster's settings and init Job, and one overlay per IDC.
const clusterDir = "../cluster"

var idcDirs = []string{"../idc1", "../idc2"}

// load renders what one IDC runs: the cluster's kustomization and the IDC's
// overlay (idc1).
func load(t *testing.T) *Manifests {
	t.Helper()
	return loadIDC(t, idcDirs[0])
}

func loadIDC(t *testing.T, dir string) *Manifests {
	t.Helper()
	m, err := Load(clusterDir, dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestManifests: every document of every kustomization renders, decodes
// strictly into its kind, and what each IDC runs passes every check.
func TestManifests(t *testing.T) {
	for _, dir := range idcDirs {
		m := loadIDC(t, dir)
		if len(m.StatefulSets) != 1 || len(m.Services) == 0 || len(m.ConfigMaps) == 0 || len(m.PDBs) == 0 || len(m.Jobs) != 1 {
			t.Fatalf("%s: want a StatefulSet, a Service, a ConfigMap, a PodDisruptionBudget and the init Job; got %d, %d, %d, %d, %d",
				dir, len(m.StatefulSets), len(m.Services), len(m.ConfigMaps), len(m.PDBs), len(m.Jobs))
		}
		for _, p := range Check(m) {
			t.Errorf("%s: %s", dir, p)
		}
	}
}

// TestIDCsAndInit: the IDCs together (distinct IDCs and names, selectors
// that stay in their IDC, one cluster) and the init Job against them.
func TestIDCsAndInit(t *testing.T) {
	cl, idcs := loadApart(t)
	for _, p := range CheckCluster(cl, idcs) {
		t.Error(p)
	}
}

// loadApart renders the cluster's kustomization and each IDC overlay
// apart, as CheckCluster takes them.
func loadApart(t *testing.T) (cl *Manifests, idcs []*Manifests) {
	t.Helper()
	cl, err := Load(clusterDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range idcDirs {
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		idcs = append(idcs, m)
	}
	return cl, idcs
}

// TestEveryFileIsRendered: each *.yaml under deploy/kubernetes is a
// kustomization or listed in its directory's one, so none escapes the
// checks (the manifests used to be plain files read by a glob).
func TestEveryFileIsRendered(t *testing.T) {
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "check" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".yaml") || d.Name() == "kustomization.yaml" {
			return nil
		}
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(p), "kustomization.yaml"))
		if err != nil {
			t.Errorf("%s: no kustomization.yaml beside it, so nothing renders or checks it", p)
			return nil
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(raw, &k); err != nil {
			return err
		}
		if !slices.Contains(k.Resources, d.Name()) {
			t.Errorf("%s: not among the resources of its kustomization.yaml, so nothing renders or checks it", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDecodeIsStrict: a misspelt or misplaced field, a duplicate key, a
// wrong type and an unknown kind all fail.
func TestDecodeIsStrict(t *testing.T) {
	raw, err := os.ReadFile("../base/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := os.ReadFile("../base/pdb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := string(raw)
	for _, c := range []struct {
		name, old, new, want string
		doc                  string
	}{
		{"misspelt field", "terminationGracePeriodSeconds: 60", "terminationGracePeriod: 60", `unknown field "spec.template.spec.terminationGracePeriod"`, good},
		{"field at the wrong level", "      enableServiceLinks: false", "      enableServiceLinks: false\n      readOnlyRootFilesystem: true", `unknown field "spec.template.spec.readOnlyRootFilesystem"`, good},
		{"duplicate key", "  replicas: 3", "  replicas: 3\n  replicas: 5", `"replicas" already set`, good},
		{"wrong type", "  replicas: 3", "  replicas: three", "replicas", good},
		{"wrong case", "  replicas: 3", "  Replicas: 3", `unknown field "spec.Replicas"`, good},
		{"unknown kind", "kind: StatefulSet", "kind: Deployment", `unknown kind "Deployment"`, good},
		{"unknown apiVersion", "apiVersion: policy/v1", "apiVersion: policy/v1beta1", `unknown kind "PodDisruptionBudget" of apiVersion "policy/v1beta1"`, string(pdb)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(c.doc, c.old) {
				t.Fatalf("the manifest no longer contains %q: update the test", c.old)
			}
			broken := strings.Replace(c.doc, c.old, c.new, 1)
			m := &Manifests{}
			err := m.add("test.yaml", []byte(broken))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	docs := SplitDocuments([]byte("# only a comment\n---\na: 1\n--- # next\nb: 2\n...\n---\n\n# nothing\n"))
	if len(docs) != 2 || string(docs[0]) != "a: 1\n" || string(docs[1]) != "b: 2\n" {
		t.Fatalf("got %q", docs)
	}
}

// TestChecksCatchBreakage breaks one property at a time (on a fresh copy
// of the manifests) and wants the check that guards it to say so: a check
// that cannot fail proves nothing.
func TestChecksCatchBreakage(t *testing.T) {
	sts := func(m *Manifests) *appsv1.StatefulSet { return m.StatefulSets[0] }
	ctr := func(m *Manifests) *corev1.Container { return &sts(m).Spec.Template.Spec.Containers[0] }
	setArg := func(m *Manifests, prefix, arg string) {
		c := ctr(m)
		for i, a := range c.Args {
			if strings.HasPrefix(a, prefix) {
				c.Args[i] = arg
				return
			}
		}
		c.Args = append(c.Args, arg)
	}
	// cm is the IDC's ConfigMap, clusterCM the cluster's (Load's order).
	cm := func(m *Manifests) map[string]string { return m.ConfigMaps[1].Data }
	clusterCM := func(m *Manifests) map[string]string { return m.ConfigMaps[0].Data }
	i64 := func(v int64) *int64 { return &v }
	i32 := func(v int32) *int32 { return &v }
	bp := func(v bool) *bool { return &v }

	for _, c := range []struct {
		name   string
		break_ func(m *Manifests)
		want   string
	}{
		{"readiness path", func(m *Manifests) { ctr(m).ReadinessProbe.HTTPGet.Path = "/ready" }, "readinessProbe path"},
		{"liveness on /readyz", func(m *Manifests) { ctr(m).LivenessProbe.HTTPGet.Path = "/readyz" }, "livenessProbe path"},
		{"probe on the RPC port", func(m *Manifests) { ctr(m).ReadinessProbe.HTTPGet.Port = intstr.FromString("rpc") }, "readinessProbe port rpc is 8888, not the admin port 8889"},
		{"probe on a missing port", func(m *Manifests) { ctr(m).LivenessProbe.HTTPGet.Port = intstr.FromInt32(9999) }, "livenessProbe port 9999"},
		{"admin port moved", func(m *Manifests) { setArg(m, "--admin-addr", "--admin-addr=:9889") }, "--admin-addr port 9889 is not among the container's ports"},
		{"no startup probe", func(m *Manifests) { ctr(m).StartupProbe = nil }, "no startupProbe"},
		{"short startup probe", func(m *Manifests) { ctr(m).StartupProbe.FailureThreshold = 10 }, "startupProbe gives the node 20s"},
		{"short grace", func(m *Manifests) { sts(m).Spec.Template.Spec.TerminationGracePeriodSeconds = i64(20) }, "terminationGracePeriodSeconds 20"},
		{"default grace", func(m *Manifests) {
			sts(m).Spec.Template.Spec.TerminationGracePeriodSeconds = nil
			cm(m)["IDGEN_SHUTDOWN_TIMEOUT"] = "15s"
		}, "terminationGracePeriodSeconds 30"},
		{"longer drain", func(m *Manifests) { cm(m)["IDGEN_SHUTDOWN_TIMEOUT"] = "45s" }, "drain (shutdown_timeout) 45s"},
		{"longer drain by flag", func(m *Manifests) { setArg(m, "--shutdown-timeout", "--shutdown-timeout=1m") }, "drain (shutdown_timeout) 1m0s"},
		{"data dir off the claim", func(m *Manifests) { setArg(m, "--data-dir", "--data-dir=/data") }, `--data-dir "/data" is on no volume mount`},
		{"properties on the secret volume", func(m *Manifests) { setArg(m, "--properties-dir", "--properties-dir=/etc/idgen/secrets/w") }, `is on volume "secrets", which is no volumeClaimTemplate`},
		{"relative data dir", func(m *Manifests) { setArg(m, "--data-dir", "--data-dir=./data") }, "is relative"},
		{"claim renamed", func(m *Manifests) { sts(m).Spec.VolumeClaimTemplates[0].Name = "state" }, `volume "data", which is no volumeClaimTemplate`},
		{"claims deleted on scale-down", func(m *Manifests) {
			sts(m).Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
		}, "persistentVolumeClaimRetentionPolicy"},
		{"root", func(m *Manifests) { ctr(m).SecurityContext.RunAsNonRoot = bp(false) }, "runAsNonRoot is not true"},
		{"uid 0", func(m *Manifests) { ctr(m).SecurityContext.RunAsUser = i64(0) }, "runAsUser"},
		{"writable root", func(m *Manifests) { ctr(m).SecurityContext.ReadOnlyRootFilesystem = bp(false) }, "readOnlyRootFilesystem"},
		{"escalation", func(m *Manifests) { ctr(m).SecurityContext.AllowPrivilegeEscalation = nil }, "allowPrivilegeEscalation"},
		{"capabilities kept", func(m *Manifests) { ctr(m).SecurityContext.Capabilities.Drop = nil }, "do not drop ALL"},
		{"capability added", func(m *Manifests) { ctr(m).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"} }, "capabilities add"},
		{"no seccomp", func(m *Manifests) {
			ctr(m).SecurityContext.SeccompProfile = nil
			sts(m).Spec.Template.Spec.SecurityContext.SeccompProfile = nil
		}, "seccompProfile"},
		{"no memory limit", func(m *Manifests) { delete(ctr(m).Resources.Limits, corev1.ResourceMemory) }, "no memory limit"},
		{"PDB selects other pods", func(m *Manifests) {
			m.PDBs[0].Spec.Selector.MatchLabels["app.kubernetes.io/instance"] = "other"
		}, "PodDisruptionBudget idgen-idc1: selector does not match"},
		{"PDB allows two", func(m *Manifests) { v := intstr.FromInt32(2); m.PDBs[0].Spec.MaxUnavailable = &v }, "maxUnavailable must be 1"},
		{"PDB in percent", func(m *Manifests) { v := intstr.FromString("34%"); m.PDBs[0].Spec.MaxUnavailable = &v }, "maxUnavailable must be 1"},
		{"DSN on the command line", func(m *Manifests) { setArg(m, "--mysql-file", "--mysql=idgen:pw@tcp(db:3306)/idgen") }, "--mysql puts a secret on the command line"},
		{"admin token on the command line", func(m *Manifests) { ctr(m).Args = append(ctr(m).Args, "--admin-token", "0123456789abcdef0123") }, "--admin-token puts a secret on the command line"},
		{"token in the environment", func(m *Manifests) {
			ctr(m).Env = append(ctr(m).Env, corev1.EnvVar{Name: "IDGEN_CLIENT_TOKEN", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "idgen-secrets"}, Key: "client.token"}}})
		}, "IDGEN_CLIENT_TOKEN (env IDGEN_CLIENT_TOKEN) puts a secret in the environment"},
		{"secret in the ConfigMap", func(m *Manifests) { cm(m)["IDGEN_ZK_AUTH"] = "idgen:pw" }, "ConfigMap idgen-idc-idc1: key IDGEN_ZK_AUTH holds a secret"},
		{"secret in the cluster's ConfigMap", func(m *Manifests) { clusterCM(m)["IDGEN_MYSQL"] = "u:p@tcp(db)/idgen" }, "ConfigMap idgen-cluster: key IDGEN_MYSQL holds a secret"},
		{"secret file off the Secret", func(m *Manifests) {
			setArg(m, "--admin-token-file", "--admin-token-file=/var/lib/idgen/admin.token")
		}, "--admin-token-file=/var/lib/idgen/admin.token is not in a Secret volume"},
		{"no admin token file", func(m *Manifests) { setArg(m, "--admin-token-file", "--log-level=info") }, "no --admin-token-file"},
		{"world-readable secrets", func(m *Manifests) {
			sts(m).Spec.Template.Spec.Volumes[0].Secret.DefaultMode = i32(0o444)
		}, "readable or writable by users other than idgen"},
		{"group-readable secrets", func(m *Manifests) {
			sts(m).Spec.Template.Spec.Volumes[0].Secret.DefaultMode = i32(0o440)
		}, "want defaultMode 0400"},
		{"no fsGroup", func(m *Manifests) { sts(m).Spec.Template.Spec.SecurityContext.FSGroup = nil }, "sets no fsGroup"},
		{"runAsGroup is not fsGroup", func(m *Manifests) {
			g := int64(1000)
			sts(m).Spec.Template.Spec.SecurityContext.FSGroup = &g
		}, "runAsGroup must equal fsGroup (1000)"},
		{"service links", func(m *Manifests) { sts(m).Spec.Template.Spec.EnableServiceLinks = nil }, "enableServiceLinks is not false"},
		{"no advertised pod IP", func(m *Manifests) { ctr(m).Env = nil }, "IDGEN_ADVERTISE_HOST must come from the downward API"},
		{"one advertised host for all", func(m *Manifests) { ctr(m).Env[0] = corev1.EnvVar{Name: "IDGEN_ADVERTISE_HOST", Value: "10.0.0.1"} }, "IDGEN_ADVERTISE_HOST must come"},
		{"loopback admin", func(m *Manifests) { setArg(m, "--admin-addr", "--admin-addr=127.0.0.1:8889") }, "listens on one address only"},
		{"standalone replicas", func(m *Manifests) {
			delete(clusterCM(m), "IDGEN_ZK")
			setArg(m, "--mysql-file", "--log-level=info")
		}, "separate standalone ID spaces"},
		{"no IDC", func(m *Manifests) { delete(cm(m), "IDGEN_IDC") }, "the IDC must be set explicitly"},
		{"IDC out of range", func(m *Manifests) { cm(m)["IDGEN_IDC"] = "4" }, "to 0..3"},
		{"pinned node", func(m *Manifests) { cm(m)["IDGEN_NODE"] = "3" }, "pins a node number"},
		{"no anti-affinity", func(m *Manifests) { sts(m).Spec.Template.Spec.Affinity = nil }, "no podAntiAffinity"},
		{"anti-affinity on zones only", func(m *Manifests) {
			sts(m).Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = "topology.kubernetes.io/zone"
		}, "no podAntiAffinity"},
		{"service not headless", func(m *Manifests) { m.Services[0].Spec.ClusterIP = "" }, "is not headless"},
		{"service selects nothing", func(m *Manifests) { m.Services[0].Spec.Selector = map[string]string{"app": "x"} }, "Service idgen-idc1: selector"},
		{"service port name", func(m *Manifests) { m.Services[0].Spec.Ports[0].TargetPort = intstr.FromString("grpc") }, `targets "grpc"`},
		{"selector mismatch", func(m *Manifests) { sts(m).Spec.Template.Labels = map[string]string{"app": "x"} }, "does not select its own pod template"},
		{"service account token", func(m *Manifests) { sts(m).Spec.Template.Spec.AutomountServiceAccountToken = nil }, "automountServiceAccountToken"},
		{"unknown ConfigMap", func(m *Manifests) { ctr(m).EnvFrom[0].ConfigMapRef.Name = "idgen-cfg" }, `envFrom ConfigMap "idgen-cfg" is not in the manifests`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := load(t)
			c.break_(m)
			problems := Check(m)
			for _, p := range problems {
				if strings.Contains(p, c.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %q", c.want, problems)
		})
	}
}

// TestSecretMountProblemsOnce: a problem of the Secret mount itself (no
// fsGroup, mounted writable) is reported once, not once per secret file in
// it (the manifests put every secret file in one mount).
func TestSecretMountProblemsOnce(t *testing.T) {
	m := load(t)
	pod := &m.StatefulSets[0].Spec.Template.Spec
	pod.SecurityContext.FSGroup = nil
	for i := range pod.Containers[0].VolumeMounts {
		pod.Containers[0].VolumeMounts[i].ReadOnly = false
	}
	for _, want := range []string{"sets no fsGroup", "is mounted writable"} {
		n := 0
		for _, p := range Check(m) {
			if strings.Contains(p, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d problems mention %q, want 1", n, want)
		}
	}
}

// TestClusterChecksCatchBreakage: each way of breaking the IDCs' agreement
// or the init Job is reported.
func TestClusterChecksCatchBreakage(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	i32 := func(v int32) *int32 { return &v }
	bp := func(v bool) *bool { return &v }
	idcCM := func(m *Manifests) map[string]string { return m.ConfigMaps[0].Data }
	job := func(cl *Manifests) *batchv1.Job { return cl.Jobs[0] }
	initCtr := func(cl *Manifests) *corev1.Container { return &job(cl).Spec.Template.Spec.Containers[0] }
	for _, c := range []struct {
		name   string
		break_ func(cl *Manifests, idcs []*Manifests) []*Manifests
		want   string
	}{
		{"one IDC only", func(cl *Manifests, idcs []*Manifests) []*Manifests { return idcs[:1] }, "want at least two"},
		{"same IDC twice", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			idcCM(idcs[1])["IDGEN_IDC"] = "1"
			return idcs
		}, "both run IDC 1"},
		{"another cluster in one IDC", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			idcCM(idcs[1])["IDGEN_CLUSTER"] = "other"
			return idcs
		}, `differ in --cluster ("prod", "other")`},
		{"a renamed copy without its own names", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			idcs[1].PDBs[0].Name = idcs[0].PDBs[0].Name
			return idcs
		}, "PodDisruptionBudget idgen-idc1 is in the overlays of both"},
		{"selectors without the instance", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			delete(idcs[1].StatefulSets[0].Spec.Selector.MatchLabels, "app.kubernetes.io/instance")
			delete(idcs[1].Services[0].Spec.Selector, "app.kubernetes.io/instance")
			delete(idcs[1].PDBs[0].Spec.Selector.MatchLabels, "app.kubernetes.io/instance")
			return idcs
		}, "StatefulSet idgen-idc2: its selector finds the pods of idgen-idc1"},
		{"PDB across IDCs", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			delete(idcs[0].PDBs[0].Spec.Selector.MatchLabels, "app.kubernetes.io/instance")
			return idcs
		}, "PodDisruptionBudget idgen-idc1: its selector finds the pods of idgen-idc2"},
		{"Job deleted after it ran", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			job(cl).Spec.TTLSecondsAfterFinished = i32(600)
			return idcs
		}, "ttlSecondsAfterFinished"},
		{"no backoff limit", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			job(cl).Spec.BackoffLimit = nil
			return idcs
		}, "no backoffLimit"},
		{"migrate beside init", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			p := &job(cl).Spec.Template.Spec
			p.Containers = append(p.Containers, p.InitContainers...)
			p.InitContainers = nil
			return idcs
		}, "must be an init container before"},
		{"no migrate", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			job(cl).Spec.Template.Spec.InitContainers = nil
			return idcs
		}, "no container runs `idctl db migrate`"},
		{"init fails on a retry", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			initCtr(cl).Command = []string{"/usr/local/bin/idctl", "cluster", "init"}
			return idcs
		}, "without --exists-ok"},
		{"init of another cluster", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			initCtr(cl).Command = append(initCtr(cl).Command, "--cluster=staging")
			return idcs
		}, `cluster init's --cluster is "staging"`},
		{"init without ZooKeeper auth", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			initCtr(cl).Env = nil
			return idcs
		}, "no IDGEN_ZK_AUTH_FILE"},
		{"ZooKeeper auth in the environment", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			initCtr(cl).Env = append(initCtr(cl).Env, corev1.EnvVar{Name: "IDGEN_ZK_AUTH", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "idgen-secrets"}, Key: "zk.auth"}}})
			return idcs
		}, "IDGEN_ZK_AUTH (env IDGEN_ZK_AUTH) puts a secret in the environment"},
		{"DSN file off the Secret", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			job(cl).Spec.Template.Spec.InitContainers[0].Env[0].Value = "/tmp/mysql.dsn"
			return idcs
		}, "IDGEN_MYSQL_FILE=/tmp/mysql.dsn is not in a Secret volume"},
		{"readable secrets", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			job(cl).Spec.Template.Spec.Volumes[0].Secret.DefaultMode = i32(0o444)
			return idcs
		}, "want defaultMode 0400"},
		{"Job as root", func(cl *Manifests, idcs []*Manifests) []*Manifests {
			initCtr(cl).SecurityContext.RunAsNonRoot = bp(false)
			initCtr(cl).SecurityContext.RunAsUser = i64(0)
			return idcs
		}, "container cluster-init: runAsNonRoot is not true"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, idcs := loadApart(t)
			problems := CheckCluster(cl, c.break_(cl, idcs))
			for _, p := range problems {
				if strings.Contains(p, c.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %q", c.want, problems)
		})
	}
}
