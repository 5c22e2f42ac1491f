package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// manifests are the decoded Kubernetes objects of deploy/kubernetes.
type manifests struct {
	files       []string // every YAML file, kustomization.yaml excluded
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	pdbs        map[string]*policyv1.PodDisruptionBudget
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret // from secret.example.yaml
}

// strictDecode converts one YAML document to JSON and decodes it into out,
// refusing unknown fields: a misspelt field (readinesProbe) or a wrong type
// (a quantity "1Gb") fails here as the API server would refuse it.
func strictDecode(doc map[string]any, out any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	m := manifests{
		deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
	}
	paths, err := filepath.Glob("kubernetes/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, filepath.Base(p))
		f, err := os.Open(p)
		require.NoError(t, err)
		dec := yaml.NewDecoder(f)
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "%s must parse", p)
			if doc == nil {
				continue
			}
			kind, _ := doc["kind"].(string)
			var obj interface{ GetName() string }
			switch kind {
			case "Deployment":
				d := &appsv1.Deployment{}
				require.NoError(t, strictDecode(doc, d), "%s: Deployment", p)
				m.deployments[d.Name], obj = d, d
			case "Job":
				j := &batchv1.Job{}
				require.NoError(t, strictDecode(doc, j), "%s: Job", p)
				m.jobs[j.Name], obj = j, j
			case "PodDisruptionBudget":
				d := &policyv1.PodDisruptionBudget{}
				require.NoError(t, strictDecode(doc, d), "%s: PodDisruptionBudget", p)
				m.pdbs[d.Name], obj = d, d
			case "Service":
				s := &corev1.Service{}
				require.NoError(t, strictDecode(doc, s), "%s: Service", p)
				m.services[s.Name], obj = s, s
			case "ConfigMap":
				c := &corev1.ConfigMap{}
				require.NoError(t, strictDecode(doc, c), "%s: ConfigMap", p)
				m.configMaps[c.Name], obj = c, c
			case "Secret":
				s := &corev1.Secret{}
				require.NoError(t, strictDecode(doc, s), "%s: Secret", p)
				m.secrets[s.Name], obj = s, s
			default:
				t.Fatalf("%s: unexpected kind %q", p, kind)
			}
			require.NotEmpty(t, obj.GetName(), "%s: %s without a name", p, kind)
		}
		f.Close()
	}
	return m
}

func TestKubernetesManifestsShape(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	for _, want := range []string{"hookd-relay", "hookd-router", "hookd-dispatch", "hookd-attempt-log", "hookd-api"} {
		require.Contains(t, m.deployments, want)
	}
	require.EqualValues(t, 1, *m.deployments["hookd-relay"].Spec.Replicas, "one relay streams; leader election makes a second a standby only")
	require.Contains(t, m.jobs, "hookd-migrate")
	require.Equal(t, []string{"migrate"}, m.jobs["hookd-migrate"].Spec.Template.Spec.Containers[0].Args)

	// The dispatchers have a PodDisruptionBudget selecting them.
	covered := map[string]bool{}
	for name, pdb := range m.pdbs {
		matched := false
		for dname, d := range m.deployments {
			if selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				matched, covered[dname] = true, true
			}
		}
		require.True(t, matched, "PodDisruptionBudget %s selects no Deployment", name)
		require.True(t, (pdb.Spec.MaxUnavailable == nil) != (pdb.Spec.MinAvailable == nil), "PodDisruptionBudget %s: exactly one of maxUnavailable, minAvailable", name)
	}
	require.True(t, covered["hookd-dispatch"], "dispatchers need a PodDisruptionBudget")
	for name, svc := range m.services {
		matched := false
		for _, d := range m.deployments {
			matched = matched || selects(svc.Spec.Selector, d.Spec.Template.Labels)
		}
		require.True(t, matched, "Service %s selects no Deployment", name)
	}

	for name, d := range m.deployments {
		require.True(t, selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels), "%s: selector must match its pod labels", name)
		pod := d.Spec.Template.Spec
		require.Len(t, pod.Containers, 1, name)
		c := pod.Containers[0]
		require.Equal(t, "hookd", c.Image, "%s: the image is set by kustomization.yaml's images", name)
		require.NotNil(t, c.ReadinessProbe, "%s: readiness probe", name)
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, name)
		require.NotNil(t, c.LivenessProbe, "%s: liveness probe", name)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, name)
		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: cpu request", name)
		require.False(t, c.Resources.Requests.Memory().IsZero(), "%s: memory request", name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: memory limit", name)
		require.NotNil(t, pod.SecurityContext.RunAsNonRoot, name)
		require.True(t, *pod.SecurityContext.RunAsNonRoot, "%s: non-root", name)
		require.EqualValues(t, 65532, *pod.SecurityContext.RunAsUser, "%s: the Dockerfile's user", name)
		require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, name)
		require.False(t, *c.SecurityContext.AllowPrivilegeEscalation, name)
		require.Equal(t, "8080", d.Spec.Template.Annotations["prometheus.io/port"], name)
		require.Equal(t, "/metrics", d.Spec.Template.Annotations["prometheus.io/path"], name)
		require.Equal(t, "hookd-"+c.Args[0], name, "deployment named after its command")
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesEnvIsRealHookdConfig checks every Deployment's and Job's
// command and environment (its own env, the ConfigMaps and the example
// Secret it loads) against hookd's command line, values included.
func TestKubernetesEnvIsRealHookdConfig(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	type workload struct {
		name string
		pod  corev1.PodSpec
	}
	var ws []workload
	for n, d := range m.deployments {
		ws = append(ws, workload{n, d.Spec.Template.Spec})
	}
	for n, j := range m.jobs {
		ws = append(ws, workload{n, j.Spec.Template.Spec})
	}
	require.NotEmpty(t, ws)
	for _, w := range ws {
		c := w.pod.Containers[0]
		env := map[string]string{}
		for _, from := range c.EnvFrom {
			switch {
			case from.ConfigMapRef != nil:
				cm, ok := m.configMaps[from.ConfigMapRef.Name]
				require.True(t, ok, "%s loads ConfigMap %s, which deploy/kubernetes does not define", w.name, from.ConfigMapRef.Name)
				for k, v := range cm.Data {
					env[k] = v
				}
			case from.SecretRef != nil:
				s, ok := m.secrets[from.SecretRef.Name]
				require.True(t, ok, "%s loads Secret %s, which secret.example.yaml does not describe", w.name, from.SecretRef.Name)
				for k, v := range s.StringData {
					env[k] = v
				}
			}
		}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				s, ok := m.secrets[e.ValueFrom.SecretKeyRef.Name]
				require.True(t, ok, "%s: Secret %s is not in secret.example.yaml", w.name, e.ValueFrom.SecretKeyRef.Name)
				v, ok := s.StringData[e.ValueFrom.SecretKeyRef.Key]
				require.True(t, ok, "%s: Secret %s has no key %s", w.name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
				env[e.Name] = v
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
				require.Equal(t, "metadata.name", e.ValueFrom.FieldRef.FieldPath, "%s: %s", w.name, e.Name)
				env[e.Name] = w.name + "-5d8c7b9f4-x2x7q" // a pod's name, as the downward API gives it
			default:
				env[e.Name] = e.Value
			}
		}
		for k := range env {
			require.True(t, strings.HasPrefix(k, "HOOKD_") || k == "DATABASE_URL", "%s sets %s: not a hookd variable", w.name, k)
		}
		checkCommandEnv(t, w.name, c.Args, env)
		for _, vm := range c.VolumeMounts {
			found := slices.ContainsFunc(w.pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
			require.True(t, found, "%s mounts undefined volume %s", w.name, vm.Name)
		}
	}
	// The CA path in the ConfigMap is where the pods mount the CA Secret.
	ca := m.configMaps["hookd"].Data["HOOKD_KAFKA_TLS_CA"]
	require.Equal(t, "/etc/hookd/kafka/ca.pem", ca)
	require.Contains(t, m.secrets["hookd-kafka-ca"].StringData, "ca.pem")
	// Every pod loads the hookd Secret, so every process gets the key that
	// encrypts signing secrets at rest.
	require.Contains(t, m.secrets["hookd"].StringData, "HOOKD_SECRETS_KEY")
}

// TestKustomizationListsEveryManifest keeps kustomization.yaml in step with
// the files; secret.example.yaml stays out on purpose (applying it would
// overwrite real secrets). When kubectl is installed, `kubectl kustomize`
// must render the whole set offline.
func TestKustomizationListsEveryManifest(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	require.NoError(t, err)
	var k struct {
		Resources []string `yaml:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(b, &k))
	for _, f := range m.files {
		if f == "secret.example.yaml" {
			require.NotContains(t, k.Resources, f)
			continue
		}
		require.Contains(t, k.Resources, f, "kustomization.yaml does not list %s", f)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: kustomize rendering not checked (the parse and strict-decode tests still ran)")
	}
	out, err := exec.Command(kubectl, "kustomize", "kubernetes").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "image: hookd:dev")
	require.Equal(t, len(m.deployments)+len(m.jobs)+len(m.pdbs)+len(m.services)+len(m.configMaps), strings.Count(string(out), "\nkind: ")+boolInt(strings.HasPrefix(string(out), "kind: ")))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
