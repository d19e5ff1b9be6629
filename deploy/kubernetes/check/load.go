package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Manifests holds every object of the manifest files, by kind.
type Manifests struct {
	StatefulSets []*appsv1.StatefulSet
	Services     []*corev1.Service
	ConfigMaps   []*corev1.ConfigMap
	PDBs         []*policyv1.PodDisruptionBudget
	Jobs         []*batchv1.Job
}

// newObject returns an empty typed object for apiVersion and kind: the
// kinds idgen's manifests may hold. Anything else is refused, so a typo in
// a kind (or a kind nobody checks) fails instead of passing unchecked.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	}
	return nil, fmt.Errorf("unknown kind %q of apiVersion %q: want apps/v1 StatefulSet, v1 Service, v1 ConfigMap, policy/v1 PodDisruptionBudget or batch/v1 Job (add it to newObject and check it)", kind, apiVersion)
}

// Render builds the kustomization in dir with kustomize's own library (the
// version kubectl's `kubectl apply -k` embeds, pinned in go.mod): what
// Kubernetes is given, names suffixed, labels and patches applied.
func Render(dir string) ([]byte, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return res.AsYaml()
}

// Load renders each kustomization of dirs (Render) and decodes every
// document into one Manifests, in order: what `kubectl apply -k` of each
// puts in one namespace.
func Load(dirs ...string) (*Manifests, error) {
	m := &Manifests{}
	for _, dir := range dirs {
		data, err := Render(dir)
		if err != nil {
			return nil, err
		}
		if err := m.add(filepath.Base(dir), data); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// add decodes every document of one file into m.
func (m *Manifests) add(name string, data []byte) error {
	for i, doc := range SplitDocuments(data) {
		obj, err := Decode(doc)
		if err != nil {
			return fmt.Errorf("%s, document %d: %w", name, i+1, err)
		}
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			m.StatefulSets = append(m.StatefulSets, o)
		case *corev1.Service:
			m.Services = append(m.Services, o)
		case *corev1.ConfigMap:
			m.ConfigMaps = append(m.ConfigMaps, o)
		case *policyv1.PodDisruptionBudget:
			m.PDBs = append(m.PDBs, o)
		case *batchv1.Job:
			m.Jobs = append(m.Jobs, o)
		}
	}
	return nil
}

// SplitDocuments splits a YAML stream at its "---" lines and drops the
// documents that hold nothing but comments and blank lines.
func SplitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	content := false
	flush := func() {
		if content {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
		content = false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "---" || strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "---\t") {
			flush()
			continue
		}
		if line == "..." {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			content = true
		}
	}
	flush()
	return docs
}

// Decode decodes one document strictly into the typed object of its kind:
// an unknown or duplicate field fails. It then checks that the object
// survives a round trip (encode, decode strictly, compare) and that every
// value the document sets is in the object's encoding (nothing dropped).
func Decode(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("reading apiVersion and kind: %w", err)
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, err
	}
	if err := decodeStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding: %w", tm.Kind, err)
	}
	again, _ := newObject(tm.APIVersion, tm.Kind)
	if err := decodeStrict(out, again); err != nil {
		return nil, fmt.Errorf("%s: decoding its own encoding: %w", tm.Kind, err)
	}
	if !equality.Semantic.DeepEqual(obj, again) {
		return nil, fmt.Errorf("%s: changes in a round trip:\n%s", tm.Kind, out)
	}
	var want, got any
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, &want); err != nil {
		return nil, err
	}
	enc, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(enc, &got); err != nil {
		return nil, err
	}
	if err := contains(got, want, ""); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// decodeStrict decodes YAML into obj the way the API server reads JSON:
// sigs.k8s.io/yaml.UnmarshalStrict (duplicate keys refused), then field
// names matched case-sensitively with unknown and duplicate fields refused
// (sigs.k8s.io/json, which names the field's path). encoding/json alone
// would accept "Replicas" for "replicas", which the API server drops.
func decodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if err := errors.Join(strict...); err != nil {
		return err
	}
	scratch := reflect.New(reflect.TypeOf(obj).Elem()).Interface()
	return yaml.UnmarshalStrict(doc, scratch)
}

// contains reports the first value of want (the document) that got (the
// typed object's encoding) lacks or holds differently.
func contains(got, want any, path string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: the document has a mapping, the object %T", orRoot(path), got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				if isEmpty(wv) {
					continue // an empty value is omitted when encoded
				}
				return fmt.Errorf("%s.%s: set in the document, lost in the object", path, k)
			}
			if err := contains(gv, wv, path+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: the document's list %v, the object's %v", orRoot(path), want, got)
		}
		for i := range w {
			if err := contains(g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("%s: the document says %v, the object %v", orRoot(path), want, got)
	}
	return nil
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}
