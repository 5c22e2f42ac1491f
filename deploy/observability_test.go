package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) alertRules {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var r alertRules
	require.NoError(t, yaml.Unmarshal(b, &r), "alerts.yml must parse")
	require.NotEmpty(t, r.Groups)
	return r
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/hookd.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d), "grafana/hookd.json must parse")
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Panels)
	return d
}

// documentedMetrics are the metric names of docs/metrics.md's tables.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)`").FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	require.NotEmpty(t, out)
	return out
}

var metricName = regexp.MustCompile(`\bhookd_[a-z0-9_]+`)

// undocumented returns the hookd metrics expr names that docs/metrics.md
// does not list (histogram series suffixes folded into their family).
func undocumented(expr string, doc map[string]bool) []string {
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(n, suf) && doc[strings.TrimSuffix(n, suf)] {
				base = strings.TrimSuffix(n, suf)
			}
		}
		if !doc[base] {
			out = append(out, n)
		}
	}
	return out
}

// anchors are the GitHub-style heading anchors of a Markdown file.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	strip := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		out[strings.ReplaceAll(strip.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

func TestAlertRulesAreDocumentedAndHaveRunbooks(t *testing.T) {
	t.Parallel()
	doc := documentedMetrics(t)
	runbooks := anchors(t, "../docs/operations.md")
	want := map[string]bool{
		"HookdRelaySlotWALRetentionGrowing": false, "HookdOldestPendingDeliveryTooOld": false, "HookdDLQRateSpike": false,
		"HookdFirstAttemptFailuresAcrossEndpoints": false, "HookdDispatcherGroupEmpty": false,
	}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: only alerting rules here", g.Name)
			require.NotEmpty(t, r.Expr, r.Alert)
			require.Empty(t, undocumented(r.Expr, doc), "%s uses metrics docs/metrics.md does not list", r.Alert)
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			rb := r.Annotations["runbook"]
			require.True(t, strings.HasPrefix(rb, "docs/operations.md#"), "%s: runbook %q", r.Alert, rb)
			require.True(t, runbooks[strings.TrimPrefix(rb, "docs/operations.md#")], "%s: docs/operations.md has no section %s", r.Alert, rb)
			if _, ok := want[r.Alert]; ok {
				want[r.Alert] = true
			}
		}
	}
	for a, found := range want {
		require.True(t, found, "alerts.yml lacks %s", a)
	}
}

func TestDashboardIsDocumented(t *testing.T) {
	t.Parallel()
	doc := documentedMetrics(t)
	d := loadDashboard(t)
	n := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			n++
			require.Empty(t, undocumented(tg.Expr, doc), "panel %q uses metrics docs/metrics.md does not list", p.Title)
		}
	}
	require.Greater(t, n, 20)
	titles := ""
	for _, p := range d.Panels {
		titles += strings.ToLower(p.Title) + "\n"
	}
	for _, want := range []string{"ingress rate", "relay lag", "deliveries by outcome", "latency", "tier backlogs", "tier oldest due age", "release lateness",
		"dead letters by reason", "breaker states", "disabled endpoints", "consumer lag"} {
		require.Contains(t, titles, want)
	}
}

// TestPromtool runs promtool on the rules, their unit tests, and on every
// dashboard query (as recording rules, so that PromQL syntax is checked).
func TestPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian: apt-get install prometheus): rules checked by the parse tests only")
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
	run("check", "rules", "alerts.yml")
	run("test", "rules", "alerts_test.yml")
	// prometheus.yml loads alerts.yml. kubernetes.yml is not checked here:
	// Debian's promtool is built without Kubernetes service discovery
	// (TestKubernetesScrapeConfig parses it instead).
	run("check", "config", "prometheus.yml")

	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, p := range loadDashboard(t).Panels {
		for j, tg := range p.Targets {
			if tg.Expr == "" {
				continue
			}
			expr := strings.NewReplacer(`$job`, `.*`, `$__rate_interval`, `5m`).Replace(tg.Expr)
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel%d:target%d", i, j), Expr: expr})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	require.NoError(t, os.WriteFile(f, b, 0o600))
	run("check", "rules", f)
}

// TestKubernetesScrapeConfig checks the Kubernetes scrape job keeps the pods
// the manifests label and annotate.
func TestKubernetesScrapeConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("prometheus/kubernetes.yml")
	require.NoError(t, err)
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName     string           `yaml:"job_name"`
			MetricsPath string           `yaml:"metrics_path"`
			SD          []map[string]any `yaml:"kubernetes_sd_configs"`
			Relabel     []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	require.Equal(t, []string{"alerts.yml"}, cfg.RuleFiles)
	require.Len(t, cfg.ScrapeConfigs, 1)
	sc := cfg.ScrapeConfigs[0]
	require.Equal(t, "/metrics", sc.MetricsPath)
	require.Equal(t, "pod", sc.SD[0]["role"])
	m := loadManifests(t)
	for name, d := range m.deployments {
		for _, r := range sc.Relabel {
			if r.Action != "keep" {
				continue
			}
			var v string
			switch r.SourceLabels[0] {
			case "__meta_kubernetes_pod_label_app_kubernetes_io_name":
				v = d.Spec.Template.Labels["app.kubernetes.io/name"]
			case "__meta_kubernetes_pod_annotation_prometheus_io_scrape":
				v = d.Spec.Template.Annotations["prometheus.io/scrape"]
			default:
				t.Fatalf("unexpected keep rule on %v", r.SourceLabels)
			}
			require.Regexp(t, "^(?:"+r.Regex+")$", v, "%s would not be scraped", name)
		}
	}
}
