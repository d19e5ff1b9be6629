package check

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// What idgen does, which the manifests must fit. Each figure names where it
// comes from; change it there and here together.
const (
	// The SIGTERM sequence of server/main.go (Run): the ORDERED hand-off
	// (bounded by 10 s in server/ordered_start.go, owners.close), the drain
	// (shutdown_timeout), the worker lease's close writing the exact mark
	// (5 s, server/main.go) and the admin server's shutdown (2 s).
	handOffMax    = 10 * time.Second
	leaseCloseMax = 5 * time.Second
	adminCloseMax = 2 * time.Second

	// Defaults: README.md "Configuration" (server/config.go DefaultConfig).
	defaultShutdownTimeout = 10 * time.Second
	defaultHeartbeat       = 3 * time.Second
	defaultOutageTolerance = 30 * time.Second
	defaultRPCAddr         = ":8888"
	defaultAdminAddr       = ":8889"
	defaultDataDir         = "./data"
	defaultIDCBits         = 2

	// highWaterMargin completes the lead: a slot's mark is written
	// heartbeat_interval + outage_tolerance + 2 s ahead (worker.Config.Lead),
	// and a slot taken after a ZooKeeper epoch change waits one lead.
	highWaterMargin = 2 * time.Second

	// Kubernetes defaults of unset fields.
	k8sDefaultGrace            = 30
	k8sDefaultPeriodSeconds    = 10
	k8sDefaultFailureThreshold = 3
)

// secretOptions are the secrets whose plain form must never be set: it
// shows in /proc/PID/cmdline or the environment (docs/security.md).
var secretOptions = []string{"admin-token", "client-token", "mysql", "zk-auth"}

// fileOptions name files holding secrets: they must come from a Secret.
var fileOptions = []string{"admin-token-file", "client-token-file", "mysql-file", "zk-auth-file", "master-key-file", "tls-key"}

// boolFlags take no value after them on a command line.
var boolFlags = map[string]bool{"allow-cached-slot": true, "mysql-accept-unsafe-durability": true, "version": true}

// envName is the IDGEN_* twin of a flag (server/config.go option.env).
func envName(opt string) string {
	return "IDGEN_" + strings.ToUpper(strings.ReplaceAll(opt, "-", "_"))
}

// Check returns every problem of the manifests; none means they pass.
func Check(m *Manifests) []string {
	c := &checker{m: m}
	c.run()
	return c.problems
}

type checker struct {
	m        *Manifests
	problems []string
}

func (c *checker) bad(format string, a ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, a...))
}

// envValue is one IDGEN_* variable of the container, resolved.
type envValue struct {
	value     string
	from      string // where it comes from, for messages
	secretRef bool   // valueFrom.secretKeyRef (or envFrom a Secret)
	fieldPath string // valueFrom.fieldRef
}

// settings resolves idgen's settings the way idgen does: flags, then
// IDGEN_* variables, then the default.
type settings struct {
	flags map[string]string
	env   map[string]envValue
}

func (s settings) get(opt, def string) (value, from string, set bool) {
	if v, ok := s.flags[opt]; ok {
		return v, "--" + opt, true
	}
	if e, ok := s.env[envName(opt)]; ok {
		return e.value, e.from, true
	}
	return def, "default", false
}

func (c *checker) run() {
	if len(c.m.StatefulSets) != 1 {
		c.bad("want exactly one StatefulSet, found %d", len(c.m.StatefulSets))
		return
	}
	sts := c.m.StatefulSets[0]
	pod := &sts.Spec.Template
	podLabels := labels.Set(pod.Labels)

	// Selector, Service, PodDisruptionBudget: all must find these pods.
	if sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(podLabels) {
		c.bad("StatefulSet %s: spec.selector does not select its own pod template's labels %v", sts.Name, pod.Labels)
	}
	c.checkService(sts, podLabels)
	c.checkPDB(sts, podLabels)

	var ctr *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "idgen" {
			ctr = &pod.Spec.Containers[i]
		}
	}
	if ctr == nil {
		c.bad("StatefulSet %s: no container named idgen", sts.Name)
		return
	}
	s := c.resolve(ctr)

	c.checkMode(sts, s)
	c.checkAddrs(ctr, s)
	c.checkStorage(sts, ctr, s)
	c.checkProbes(ctr, s)
	c.checkGrace(sts, s)
	c.checkSecurity(&pod.Spec, ctr)
	c.checkResources(ctr)
	c.checkSecrets(&pod.Spec, ctr, s)
	c.checkScheduling(&pod.Spec, podLabels)
}

// resolve reads the container's command line and environment.
func (c *checker) resolve(ctr *corev1.Container) settings {
	s := settings{flags: map[string]string{}, env: map[string]envValue{}}
	if len(ctr.Command) > 0 && path.Base(ctr.Command[0]) != "idgen" {
		c.bad("container idgen: command %q does not run idgen", ctr.Command)
	}
	words := slices.Clone(ctr.Args)
	if len(ctr.Command) > 1 {
		words = append(slices.Clone(ctr.Command[1:]), words...)
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") {
			c.bad("container idgen: argument %q is not a flag (idgen takes only flags)", w)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if !hasValue && !boolFlags[name] {
			if i+1 < len(words) {
				value = words[i+1]
				i++
			}
		}
		if !hasValue && boolFlags[name] {
			value = "true"
		}
		s.flags[name] = value
	}
	s.env = c.resolveEnv(ctr)
	return s
}

// resolveEnv returns a container's environment as Kubernetes builds it:
// envFrom ConfigMaps (a missing one is a problem unless optional), then
// env, each later source winning.
func (c *checker) resolveEnv(ctr *corev1.Container) map[string]envValue {
	env := map[string]envValue{}
	for _, ef := range ctr.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm := c.configMap(ef.ConfigMapRef.Name)
			if cm == nil {
				if ef.ConfigMapRef.Optional == nil || !*ef.ConfigMapRef.Optional {
					c.bad("container %s: envFrom ConfigMap %q is not in the manifests", ctr.Name, ef.ConfigMapRef.Name)
				}
				continue
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = envValue{value: v, from: "ConfigMap " + cm.Name + " " + ef.Prefix + k}
			}
		case ef.SecretRef != nil:
			// Its keys are unknown here; every one is a secret in the
			// environment, which checkSecrets refuses.
			env["envFrom Secret "+ef.SecretRef.Name] = envValue{from: "envFrom Secret " + ef.SecretRef.Name, secretRef: true}
		}
	}
	for _, e := range ctr.Env {
		v := envValue{value: e.Value, from: "env " + e.Name}
		if vf := e.ValueFrom; vf != nil {
			switch {
			case vf.ConfigMapKeyRef != nil:
				cm := c.configMap(vf.ConfigMapKeyRef.Name)
				if cm == nil {
					c.bad("container %s: env %s: ConfigMap %q is not in the manifests", ctr.Name, e.Name, vf.ConfigMapKeyRef.Name)
				} else {
					v.value = cm.Data[vf.ConfigMapKeyRef.Key]
				}
			case vf.SecretKeyRef != nil:
				v.secretRef = true
			case vf.FieldRef != nil:
				v.fieldPath = vf.FieldRef.FieldPath
			}
		}
		env[e.Name] = v
	}
	return env
}

func (c *checker) configMap(name string) *corev1.ConfigMap {
	for _, cm := range c.m.ConfigMaps {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

// checkMode: several replicas must share one ID space (a cluster), and each
// pod needs its IDC, its own node slot and an address peers can reach.
func (c *checker) checkMode(sts *appsv1.StatefulSet, s settings) {
	zk, _, _ := s.get("zk", "")
	mysql, _, _ := s.get("mysql", "")
	mysqlFile, _, _ := s.get("mysql-file", "")
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	if replicas > 1 && zk == "" && mysql == "" && mysqlFile == "" {
		c.bad("StatefulSet %s: %d replicas without --zk or --mysql are %d separate standalone ID spaces handing out the same IDs: set IDGEN_ZK (and the MySQL DSN file)", sts.Name, replicas, replicas)
	}
	if v, from, set := s.get("node", "-1"); set && v != "-1" {
		c.bad("container idgen: %s=%s pins a node number, which a cluster refuses (slots are claimed in ZooKeeper or MySQL)", from, v)
	}
	idc, from, set := s.get("idc", "0")
	bits := defaultIDCBits
	if b, _, ok := s.get("idc-bits", ""); ok {
		bits, _ = strconv.Atoi(b)
	}
	if n, err := strconv.Atoi(idc); !set || err != nil || n < 0 || n >= 1<<bits {
		c.bad("container idgen: the IDC must be set explicitly (IDGEN_IDC, one StatefulSet per IDC) to 0..%d, got %q from %s", 1<<bits-1, idc, from)
	}
	e, ok := s.env["IDGEN_ADVERTISE_HOST"]
	if _, flag := s.flags["advertise-host"]; flag || !ok || e.fieldPath != "status.podIP" {
		c.bad("container idgen: IDGEN_ADVERTISE_HOST must come from the downward API (valueFrom.fieldRef.fieldPath: status.podIP): it is the address peers and clients dial, and every pod has its own")
	}
}

// listenPort returns the port of a listen address; the host must be empty or a wildcard so
// that the kubelet's probes and other pods reach it on the pod IP.
func (c *checker) listenPort(opt, def string, s settings) int {
	addr, from, _ := s.get(opt, def)
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		c.bad("container idgen: %s=%q is not HOST:PORT", from, addr)
		return 0
	}
	switch host {
	case "", "0.0.0.0", "::":
	default:
		c.bad("container idgen: %s=%q listens on one address only: probes and peers reach the pod IP, so listen on all addresses (:%d)", from, addr, n)
	}
	return n
}

func (c *checker) checkAddrs(ctr *corev1.Container, s settings) {
	for _, a := range []struct{ opt, def string }{{"rpc-addr", defaultRPCAddr}, {"admin-addr", defaultAdminAddr}} {
		n := c.listenPort(a.opt, a.def, s)
		if n == 0 {
			continue
		}
		if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == n }) {
			c.bad("container idgen: --%s port %d is not among the container's ports", a.opt, n)
		}
	}
}

// mountOf returns the mount holding path p (the longest mountPath prefix).
func mountOf(ctr *corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i := range ctr.VolumeMounts {
		vm := &ctr.VolumeMounts[i]
		mp := strings.TrimSuffix(vm.MountPath, "/")
		if p == mp || strings.HasPrefix(p, mp+"/") {
			if best == nil || len(mp) > len(best.MountPath) {
				best = vm
			}
		}
	}
	return best
}

// checkStorage: the data dir and the properties dir (the slot's mark) are
// on the pod's PersistentVolumeClaim, writable, and kept.
func (c *checker) checkStorage(sts *appsv1.StatefulSet, ctr *corev1.Container, s settings) {
	claims := map[string]*corev1.PersistentVolumeClaim{}
	for i := range sts.Spec.VolumeClaimTemplates {
		claims[sts.Spec.VolumeClaimTemplates[i].Name] = &sts.Spec.VolumeClaimTemplates[i]
	}
	dataDir, _, _ := s.get("data-dir", defaultDataDir)
	propsDir, _, _ := s.get("properties-dir", dataDir)
	if propsDir == "" {
		propsDir = dataDir
	}
	auditFile, _, _ := s.get("audit-file", path.Join(dataDir, "audit.jsonl"))
	for _, d := range []struct{ opt, dir string }{{"data-dir", dataDir}, {"properties-dir", propsDir}, {"audit-file", path.Dir(auditFile)}} {
		if !path.IsAbs(d.dir) {
			c.bad("container idgen: --%s %q is relative: give an absolute path on the volumeClaimTemplate's mount", d.opt, d.dir)
			continue
		}
		vm := mountOf(ctr, d.dir)
		if vm == nil {
			c.bad("container idgen: --%s %q is on no volume mount (the root filesystem is read-only, and a restart would lose it)", d.opt, d.dir)
			continue
		}
		claim := claims[vm.Name]
		if claim == nil {
			c.bad("container idgen: --%s %q is on volume %q, which is no volumeClaimTemplate: a rescheduled pod would not find its slot's mark", d.opt, d.dir, vm.Name)
			continue
		}
		if vm.ReadOnly {
			c.bad("container idgen: --%s %q is on a read-only mount", d.opt, d.dir)
		}
		if !slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOnce) && !slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOncePod) {
			c.bad("volumeClaimTemplate %s: accessModes %v: want ReadWriteOnce (one pod's own data)", claim.Name, claim.Spec.AccessModes)
		}
		if q, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]; !ok || q.Sign() <= 0 {
			c.bad("volumeClaimTemplate %s: no storage request", claim.Name)
		}
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		c.bad("StatefulSet %s: persistentVolumeClaimRetentionPolicy must Retain whenScaled and whenDeleted: the claims hold the slots' marks", sts.Name)
	}
}

// probePort resolves a probe's port to a container port number.
func probePort(ctr *corev1.Container, p intstr.IntOrString) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range ctr.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

func (c *checker) checkProbe(ctr *corev1.Container, name string, p *corev1.Probe, adminPort int, paths ...string) {
	if p == nil {
		c.bad("container idgen: no %s", name)
		return
	}
	g := p.HTTPGet
	if g == nil {
		c.bad("container idgen: %s is not an httpGet probe on the admin port", name)
		return
	}
	if !slices.Contains(paths, g.Path) {
		c.bad("container idgen: %s path %q: want one of %q", name, g.Path, paths)
	}
	if n := probePort(ctr, g.Port); n != adminPort {
		c.bad("container idgen: %s port %s is %d, not the admin port %d", name, g.Port.String(), n, adminPort)
	}
	if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
		c.bad("container idgen: %s scheme %s: the admin port speaks plain HTTP", name, g.Scheme)
	}
}

func probeBudget(p *corev1.Probe) time.Duration {
	period, fails := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = k8sDefaultPeriodSeconds
	}
	if fails == 0 {
		fails = k8sDefaultFailureThreshold
	}
	return time.Duration(p.InitialDelaySeconds+period*fails) * time.Second
}

func (c *checker) duration(opt string, def time.Duration, s settings) time.Duration {
	v, from, set := s.get(opt, "")
	if !set {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.bad("container idgen: %s=%q is not a duration", from, v)
		return def
	}
	return d
}

// checkProbes: liveness /healthz, readiness /readyz (or its strict
// per-channel form), a startup probe that outlasts the start-up wait.
func (c *checker) checkProbes(ctr *corev1.Container, s settings) {
	admin := c.listenPort("admin-addr", defaultAdminAddr, s)
	c.checkProbe(ctr, "livenessProbe", ctr.LivenessProbe, admin, "/healthz")
	c.checkProbe(ctr, "readinessProbe", ctr.ReadinessProbe, admin,
		"/readyz", "/readyz?channel=snowflake", "/readyz?channel=unordered", "/readyz?channel=ordered")
	c.checkProbe(ctr, "startupProbe", ctr.StartupProbe, admin, "/readyz", "/healthz")
	if p := ctr.StartupProbe; p != nil {
		lead := c.duration("heartbeat-interval", defaultHeartbeat, s) + c.duration("outage-tolerance", defaultOutageTolerance, s) + highWaterMargin
		if got := probeBudget(p); got < 2*lead {
			c.bad("container idgen: startupProbe gives the node %v (initialDelaySeconds + periodSeconds x failureThreshold): want at least %v, twice the lead a slot taken after a ZooKeeper epoch change waits (%v)", got, 2*lead, lead)
		}
	}
}

// checkGrace: SIGKILL must not cut the ORDERED hand-off, the drain or the
// write of the slot's exact mark.
func (c *checker) checkGrace(sts *appsv1.StatefulSet, s settings) {
	grace := int64(k8sDefaultGrace)
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	drain := c.duration("shutdown-timeout", defaultShutdownTimeout, s)
	need := handOffMax + drain + leaseCloseMax + adminCloseMax
	if time.Duration(grace)*time.Second <= need {
		c.bad("StatefulSet %s: terminationGracePeriodSeconds %d must exceed the shutdown: ORDERED hand-off %v + drain (shutdown_timeout) %v + mark write %v + admin close %v = %v",
			sts.Name, grace, handOffMax, drain, leaseCloseMax, adminCloseMax, need)
	}
}

func (c *checker) checkSecurity(pod *corev1.PodSpec, ctr *corev1.Container) {
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := ctr.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	nonRoot := psc.RunAsNonRoot
	if csc.RunAsNonRoot != nil {
		nonRoot = csc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		c.bad("container %s: runAsNonRoot is not true", ctr.Name)
	}
	uid := psc.RunAsUser
	if csc.RunAsUser != nil {
		uid = csc.RunAsUser
	}
	if uid == nil || *uid == 0 {
		c.bad("container %s: runAsUser must be set to a non-root uid (the image's is 65532)", ctr.Name)
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		c.bad("container %s: readOnlyRootFilesystem is not true", ctr.Name)
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		c.bad("container %s: allowPrivilegeEscalation is not false", ctr.Name)
	}
	if csc.Privileged != nil && *csc.Privileged {
		c.bad("container %s: privileged", ctr.Name)
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		c.bad("container %s: capabilities do not drop ALL", ctr.Name)
	} else if len(csc.Capabilities.Add) > 0 {
		c.bad("container %s: capabilities add %v: idgen needs none", ctr.Name, csc.Capabilities.Add)
	}
	sp := psc.SeccompProfile
	if csc.SeccompProfile != nil {
		sp = csc.SeccompProfile
	}
	if sp == nil || (sp.Type != corev1.SeccompProfileTypeRuntimeDefault && sp.Type != corev1.SeccompProfileTypeLocalhost) {
		c.bad("container %s: seccompProfile is not RuntimeDefault (or Localhost)", ctr.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		c.bad("pod: automountServiceAccountToken is not false: idgen never calls the Kubernetes API")
	}
}

func (c *checker) checkResources(ctr *corev1.Container) {
	r := ctr.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := r.Requests[name]; !ok || q.Sign() <= 0 {
			c.bad("container idgen: no %s request", name)
		}
	}
	if q, ok := r.Limits[corev1.ResourceMemory]; !ok || q.Sign() <= 0 {
		c.bad("container idgen: no memory limit")
	}
}

// checkSecrets: no secret on the command line or in the environment; the
// *-file settings point into a Secret volume only idgen's user reads.
func (c *checker) checkSecrets(pod *corev1.PodSpec, ctr *corev1.Container, s settings) {
	for _, opt := range secretOptions {
		if _, ok := s.flags[opt]; ok {
			c.bad("container idgen: --%s puts a secret on the command line (/proc/PID/cmdline): use --%s-file with a Secret volume", opt, opt)
		}
		if e, ok := s.env[envName(opt)]; ok {
			c.bad("container idgen: %s (%s) puts a secret in the environment: use --%s-file with a Secret volume", envName(opt), e.from, opt)
		}
	}
	for _, e := range s.env {
		if e.secretRef {
			c.bad("container idgen: %s: secrets reach idgen as files (the *-file flags), never as environment variables", e.from)
		}
	}
	for _, cm := range c.m.ConfigMaps {
		for k := range cm.Data {
			for _, opt := range secretOptions {
				if k == envName(opt) {
					c.bad("ConfigMap %s: key %s holds a secret: put it in the Secret and pass --%s-file", cm.Name, k, opt)
				}
			}
		}
	}
	for _, w := range append(slices.Clone(ctr.Command), ctr.Args...) {
		if strings.Contains(w, "@tcp(") || strings.Contains(w, "@unix(") {
			c.bad("container idgen: argument %q looks like a MySQL DSN on the command line", w)
		}
	}
	volumes := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		volumes[pod.Volumes[i].Name] = &pod.Volumes[i]
	}
	if _, _, set := s.get("admin-token-file", ""); !set {
		c.bad("container idgen: no --admin-token-file: every node of a cluster needs the same admin token, from the Secret")
	}
	fsGroup := pod.SecurityContext != nil && pod.SecurityContext.FSGroup != nil
	mounts := map[string]bool{} // Secret mounts checked: the files in one share them
	for _, opt := range fileOptions {
		file, from, set := s.get(opt, "")
		if !set {
			continue
		}
		vm := mountOf(ctr, path.Dir(file))
		if vm == nil || volumes[vm.Name] == nil || volumes[vm.Name].Secret == nil {
			c.bad("container idgen: %s=%s is not in a Secret volume", from, file)
			continue
		}
		if !mounts[vm.Name] {
			mounts[vm.Name] = true
			c.checkSecretMount(pod, ctr, vm, fsGroup)
		}
		sv := volumes[vm.Name].Secret
		mode := int32(0o644) // Kubernetes' default
		if sv.DefaultMode != nil {
			mode = *sv.DefaultMode
		}
		key := path.Base(file)
		for _, it := range sv.Items {
			if it.Path == key && it.Mode != nil {
				mode = *it.Mode
			}
		}
		// kubelet writes a Secret volume's files as root's and, with an
		// fsGroup, chowns them to that group and adds the group read bit
		// whatever the mode says (0400 becomes 0440). idgen refuses a
		// secret file other users can read (internal/secretfile) and
		// takes such a group-readable root's file only when its group is
		// idgen's own: runAsGroup equal to fsGroup.
		if mode&0o077 != 0 {
			c.bad("container idgen: %s: Secret volume %s gives mode %#o, readable or writable by users other than idgen: want defaultMode 0400", from, vm.Name, mode)
		}
	}
}

// checkSecretMount checks what the secret files of one Secret mount share:
// read-only, and files idgen's user can read and accepts (see the mode
// check in checkSecrets).
func (c *checker) checkSecretMount(pod *corev1.PodSpec, ctr *corev1.Container, vm *corev1.VolumeMount, fsGroup bool) {
	if !vm.ReadOnly {
		c.bad("container %s: the Secret volume %s is mounted writable", ctr.Name, vm.Name)
	}
	if !fsGroup {
		c.bad("container %s: Secret volume %s: the pod sets no fsGroup: its files stay root's and idgen's user cannot read them", ctr.Name, vm.Name)
	} else if g := runAsGroup(pod, ctr); g == nil || *g != *pod.SecurityContext.FSGroup {
		c.bad("container %s: Secret volume %s: runAsGroup must equal fsGroup (%d): idgen accepts a group-readable secret file only from its own group", ctr.Name, vm.Name, *pod.SecurityContext.FSGroup)
	}
}

// checkScheduling: idgen pods spread across Kubernetes nodes, and a Service
// named idgen does not inject IDGEN_* variables.
func (c *checker) checkScheduling(pod *corev1.PodSpec, podLabels labels.Set) {
	spread := false
	if a := pod.Affinity; a != nil && a.PodAntiAffinity != nil {
		terms := slices.Clone(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
		for _, t := range terms {
			sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
			if err == nil && !sel.Empty() && sel.Matches(podLabels) && t.TopologyKey == "kubernetes.io/hostname" {
				spread = true
			}
		}
	}
	if !spread {
		c.bad("pod: no podAntiAffinity on kubernetes.io/hostname selecting idgen's own pods: two idgen pods could share a Kubernetes node")
	}
	for _, svc := range c.m.Services {
		prefix := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_")) + "_"
		if strings.HasPrefix(prefix, "IDGEN_") && (pod.EnableServiceLinks == nil || *pod.EnableServiceLinks) {
			c.bad("pod: enableServiceLinks is not false, so Service %s injects %sSERVICE_HOST, %sPORT, ... which idgen reads as misspelt settings", svc.Name, prefix, prefix)
		}
	}
}

func (c *checker) checkService(sts *appsv1.StatefulSet, podLabels labels.Set) {
	var gov *corev1.Service
	for _, svc := range c.m.Services {
		if svc.Name == sts.Spec.ServiceName {
			gov = svc
		}
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			c.bad("Service %s: selector %v does not select the StatefulSet's pods", svc.Name, svc.Spec.Selector)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.Type == intstr.String {
				found := false
				for _, ctr := range sts.Spec.Template.Spec.Containers {
					for _, cp := range ctr.Ports {
						found = found || cp.Name == p.TargetPort.StrVal
					}
				}
				if !found {
					c.bad("Service %s: port %s targets %q, which no container port is named", svc.Name, p.Name, p.TargetPort.StrVal)
				}
			}
		}
	}
	switch {
	case gov == nil:
		c.bad("StatefulSet %s: serviceName %q names no Service of the manifests", sts.Name, sts.Spec.ServiceName)
	case gov.Spec.ClusterIP != corev1.ClusterIPNone:
		c.bad("Service %s governs the StatefulSet but is not headless (clusterIP: None)", gov.Name)
	}
}

func (c *checker) checkPDB(sts *appsv1.StatefulSet, podLabels labels.Set) {
	if len(c.m.PDBs) == 0 {
		c.bad("no PodDisruptionBudget")
	}
	for _, pdb := range c.m.PDBs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(podLabels) {
			c.bad("PodDisruptionBudget %s: selector does not match the pods of StatefulSet %s (labels %v)", pdb.Name, sts.Name, map[string]string(podLabels))
		}
		if pdb.Spec.MinAvailable != nil {
			c.bad("PodDisruptionBudget %s: use maxUnavailable: 1, not minAvailable", pdb.Name)
		}
		if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.Type != intstr.Int || mu.IntValue() != 1 {
			c.bad("PodDisruptionBudget %s: maxUnavailable must be 1", pdb.Name)
		}
	}
}

// runAsGroup is the container's effective primary group: its own
// securityContext's, else the pod's (nil: the image's).
func runAsGroup(pod *corev1.PodSpec, ctr *corev1.Container) *int64 {
	if ctr.SecurityContext != nil && ctr.SecurityContext.RunAsGroup != nil {
		return ctr.SecurityContext.RunAsGroup
	}
	if pod.SecurityContext != nil {
		return pod.SecurityContext.RunAsGroup
	}
	return nil
}
