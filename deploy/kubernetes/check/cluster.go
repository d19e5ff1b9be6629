package check

import (
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// clusterSettings are the settings every IDC of one cluster, and the init
// Job's `idctl cluster init`, must agree on (README.md, "Configuration":
// cluster-wide), with their defaults: an IDC that differs is another ID
// space, or a node that refuses to start.
var clusterSettings = []struct{ opt, def string }{
	{"zk", ""}, {"zk-root", "/idgen"}, {"cluster", "default"},
	{"epoch", "2020-01-01T00:00:00Z"}, {"idc-bits", "2"}, {"node-bits", "8"},
}

// idcView is what CheckCluster compares of one IDC's render.
type idcView struct {
	m        *Manifests
	name     string // the StatefulSet's
	idc      string
	settings settings
	pods     labels.Set
}

// CheckCluster checks the IDCs together and the init Job against them:
// cl is the cluster's kustomization (ConfigMap idgen-cluster and the Job),
// idcs one render per IDC overlay. Each IDC alone is Check's.
func CheckCluster(cl *Manifests, idcs []*Manifests) []string {
	c := &checker{m: cl}
	var views []idcView
	for _, m := range idcs {
		if len(m.StatefulSets) != 1 {
			c.bad("an IDC overlay renders %d StatefulSets, want 1", len(m.StatefulSets))
			continue
		}
		sts := m.StatefulSets[0]
		joint := join(cl, m)
		// Problems of the IDC alone are Check's: resolve quietly here.
		quiet := &checker{m: joint}
		v := idcView{m: m, name: sts.Name, pods: labels.Set(sts.Spec.Template.Labels)}
		for i := range sts.Spec.Template.Spec.Containers {
			if ctr := &sts.Spec.Template.Spec.Containers[i]; ctr.Name == "idgen" {
				v.settings = quiet.resolve(ctr)
			}
		}
		v.idc, _, _ = v.settings.get("idc", "0")
		views = append(views, v)
	}
	c.checkIDCs(views)
	c.checkInitJob(views)
	return c.problems
}

// join is what one `kubectl apply -k` of each puts in a namespace.
func join(a, b *Manifests) *Manifests {
	return &Manifests{
		StatefulSets: slices.Concat(a.StatefulSets, b.StatefulSets),
		Services:     slices.Concat(a.Services, b.Services),
		ConfigMaps:   slices.Concat(a.ConfigMaps, b.ConfigMaps),
		PDBs:         slices.Concat(a.PDBs, b.PDBs),
		Jobs:         slices.Concat(a.Jobs, b.Jobs),
	}
}

// checkIDCs: every IDC its own IDC number and object names, selectors that
// find only its own pods (two StatefulSets whose selectors overlap fight
// over pods; a PodDisruptionBudget across IDCs lets one IDC's drain block
// the other's), and one cluster.
func (c *checker) checkIDCs(views []idcView) {
	if len(views) < 2 {
		c.bad("%d IDC overlays: want at least two (idc1, idc2), so a second IDC is never made by renaming by hand", len(views))
	}
	names := map[string]string{} // kind/name -> StatefulSet of the IDC that has it
	for i, a := range views {
		for _, b := range views[:i] {
			if a.idc == b.idc {
				c.bad("StatefulSets %s and %s both run IDC %s: each overlay sets its own IDGEN_IDC", b.name, a.name, a.idc)
			}
			for _, s := range clusterSettings {
				va, _, _ := a.settings.get(s.opt, s.def)
				vb, _, _ := b.settings.get(s.opt, s.def)
				if va != vb {
					c.bad("StatefulSets %s and %s differ in --%s (%q, %q): the IDCs of one cluster share it (ConfigMap idgen-cluster)", b.name, a.name, s.opt, vb, va)
				}
			}
			c.selectsOnlyItsOwn(a, b)
			c.selectsOnlyItsOwn(b, a)
		}
		for _, n := range objectNames(a.m) {
			if other, ok := names[n]; ok {
				c.bad("%s is in the overlays of both %s and %s: applying the second replaces the first's (nameSuffix per overlay)", n, other, a.name)
			}
			names[n] = a.name
		}
	}
}

// selectsOnlyItsOwn: no selector of IDC a finds IDC b's pods.
func (c *checker) selectsOnlyItsOwn(a, b idcView) {
	finds := func(sel *metav1.LabelSelector) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && s.Matches(b.pods)
	}
	if finds(a.m.StatefulSets[0].Spec.Selector) {
		c.bad("StatefulSet %s: its selector finds the pods of %s too: each overlay's instance label must reach the selectors (labels: includeSelectors: true)", a.name, b.name)
	}
	for _, svc := range a.m.Services {
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(b.pods) {
			c.bad("Service %s: its selector finds the pods of %s too", svc.Name, b.name)
		}
	}
	for _, pdb := range a.m.PDBs {
		if finds(pdb.Spec.Selector) {
			c.bad("PodDisruptionBudget %s: its selector finds the pods of %s too: one IDC's disruption would count against the other's", pdb.Name, b.name)
		}
	}
}

func objectNames(m *Manifests) []string {
	var out []string
	for _, o := range m.StatefulSets {
		out = append(out, "StatefulSet "+o.Name)
	}
	for _, o := range m.Services {
		out = append(out, "Service "+o.Name)
	}
	for _, o := range m.ConfigMaps {
		out = append(out, "ConfigMap "+o.Name)
	}
	for _, o := range m.PDBs {
		out = append(out, "PodDisruptionBudget "+o.Name)
	}
	for _, o := range m.Jobs {
		out = append(out, "Job "+o.Name)
	}
	return out
}

// idctlCommand returns the idctl subcommand words a container runs
// ("db migrate", "cluster init --exists-ok"), or "" when it runs no idctl.
func idctlCommand(ctr *corev1.Container) string {
	words := slices.Concat(ctr.Command, ctr.Args)
	if len(words) == 0 || path.Base(words[0]) != "idctl" {
		return ""
	}
	return strings.Join(words[1:], " ")
}

// checkInitJob: the Job of the cluster's kustomization runs `idctl db
// migrate`, then `idctl cluster init --exists-ok` with the IDCs' ZooKeeper,
// root and cluster name and their ZooKeeper digest; it runs once (kept
// after it completes, so a re-apply does not run init again); secrets come
// as files from the Secret, as the nodes' do.
func (c *checker) checkInitJob(views []idcView) {
	if len(c.m.Jobs) != 1 {
		c.bad("the cluster's kustomization has %d Jobs, want 1 (idctl db migrate, then idctl cluster init)", len(c.m.Jobs))
		return
	}
	job := c.m.Jobs[0]
	if job.Spec.TTLSecondsAfterFinished != nil {
		c.bad("Job %s: ttlSecondsAfterFinished deletes the completed Job, so the next `kubectl apply -k` runs cluster init again (after a ZooKeeper loss that makes a new cluster the nodes refuse): remove it", job.Name)
	}
	if job.Spec.BackoffLimit == nil {
		c.bad("Job %s: no backoffLimit: set how often it retries while ZooKeeper or MySQL is not up yet", job.Name)
	}
	pod := &job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyOnFailure && pod.RestartPolicy != corev1.RestartPolicyNever {
		c.bad("Job %s: restartPolicy %q: want OnFailure or Never", job.Name, pod.RestartPolicy)
	}
	var migrate, initc *corev1.Container
	migrateFirst := false
	for i := range pod.InitContainers {
		ctr := &pod.InitContainers[i]
		switch cmd := idctlCommand(ctr); {
		case cmd == "db migrate":
			migrate, migrateFirst = ctr, initc == nil
		case strings.HasPrefix(cmd, "cluster init"):
			initc = ctr
		}
	}
	for i := range pod.Containers {
		ctr := &pod.Containers[i]
		switch cmd := idctlCommand(ctr); {
		case cmd == "db migrate":
			if migrate == nil {
				migrate = ctr // beside init, not before it
			}
		case strings.HasPrefix(cmd, "cluster init"):
			initc = ctr
		}
	}
	if migrate == nil {
		c.bad("Job %s: no container runs `idctl db migrate`", job.Name)
	} else if !migrateFirst {
		c.bad("Job %s: `idctl db migrate` must be an init container before `idctl cluster init` (containers run side by side)", job.Name)
	}
	if initc == nil {
		c.bad("Job %s: no container runs `idctl cluster init`", job.Name)
		return
	}
	if !slices.Contains(strings.Fields(idctlCommand(initc)), "--exists-ok") {
		c.bad("Job %s: `idctl cluster init` without --exists-ok fails when the Job is retried after the cluster was created", job.Name)
	}

	// Secrets: files from a read-only Secret volume, never the plain forms.
	volumes := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		volumes[pod.Volumes[i].Name] = &pod.Volumes[i]
	}
	fsGroup := pod.SecurityContext != nil && pod.SecurityContext.FSGroup != nil
	need := map[*corev1.Container][]string{initc: {"IDGEN_ZK_AUTH_FILE"}}
	if migrate != nil {
		need[migrate] = []string{"IDGEN_MYSQL_FILE"}
	}
	for _, ctr := range slices.Concat(pod.InitContainers, pod.Containers) {
		env := c.resolveEnv(&ctr)
		c.checkSecurity(pod, &ctr)
		for _, opt := range secretOptions {
			if e, ok := env[envName(opt)]; ok {
				c.bad("container %s: %s (%s) puts a secret in the environment: use %s_FILE with a Secret volume", ctr.Name, envName(opt), e.from, envName(opt))
			}
		}
		for _, e := range env {
			if e.secretRef {
				c.bad("container %s: %s: secrets reach idctl as files (the *_FILE variables), never as environment variables", ctr.Name, e.from)
			}
		}
		var required []string
		for k, v := range need {
			if k.Name == ctr.Name {
				required = v
			}
		}
		for _, name := range required {
			e, ok := env[name]
			if !ok || e.value == "" {
				what := "the cluster's znodes would be open to every ZooKeeper client (no digest ACL)"
				if name == "IDGEN_MYSQL_FILE" {
					what = "it has no database to migrate"
				}
				c.bad("container %s: no %s: %s", ctr.Name, name, what)
				continue
			}
			vm := mountOf(&ctr, path.Dir(e.value))
			if vm == nil || volumes[vm.Name] == nil || volumes[vm.Name].Secret == nil {
				c.bad("container %s: %s=%s is not in a Secret volume", ctr.Name, name, e.value)
				continue
			}
			c.checkSecretMount(pod, &ctr, vm, fsGroup)
			if sv := volumes[vm.Name].Secret; sv.DefaultMode == nil || *sv.DefaultMode&0o077 != 0 {
				c.bad("container %s: Secret volume %s: want defaultMode 0400 (owner only)", ctr.Name, vm.Name)
			}
		}
	}

	// The cluster it creates is the one the IDCs join.
	s := settings{flags: map[string]string{}, env: c.resolveEnv(initc)}
	for _, w := range strings.Fields(idctlCommand(initc)) {
		if name, value, ok := strings.Cut(strings.TrimLeft(w, "-"), "="); ok && strings.HasPrefix(w, "-") {
			s.flags[name] = value
		}
	}
	for _, v := range views {
		for _, opt := range clusterSettings[:4] { // zk, zk-root, cluster, epoch (idctl reads IDGEN_EPOCH; the bits are flags only)
			got, from, _ := s.get(opt.opt, opt.def)
			want, _, _ := v.settings.get(opt.opt, opt.def)
			if got != want {
				c.bad("Job %s: cluster init's --%s is %q (%s), StatefulSet %s's is %q: init would create another cluster than the nodes join", job.Name, opt.opt, got, from, v.name, want)
			}
		}
	}
}
