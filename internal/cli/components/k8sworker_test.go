package components

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cli"
)

func TestWrkServerK8sRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "rack.yaml")
	if err := os.WriteFile(bad, []byte("rack: k8s-eu-1\nnamespace: Bad_NS\nclient: {qps: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "unknown.yaml")
	if err := os.WriteFile(unknown, []byte("rack: k8s-eu-1\nnamespce: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: t}\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--rack-config", bad, "--kubeconfig", kubeconfig}, []string{"namespace", "client.qps"}},
		{[]string{"--rack-config", unknown, "--kubeconfig", kubeconfig}, []string{"namespce"}},
		{[]string{"--rack-config", filepath.Join(dir, "missing.yaml"), "--kubeconfig", kubeconfig}, []string{"--rack-config"}},
		{[]string{"--location", "Not A Location", "--kubeconfig", kubeconfig}, []string{"location"}},
		{[]string{"--kubeconfig", filepath.Join(dir, "missing")}, []string{"--kubeconfig"}},
		{[]string{"--kubeconfig", kubeconfig}, []string{"--ork"}},
	} {
		args := append([]string{"wrk-server-k8s-nvidia", "--data-dir", dir}, c.args...)
		code, _, errs := runCLI(t, nil, args...)
		if code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, cli.ExitUsage, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr %q does not mention %q", c.args, errs, w)
			}
		}
	}
}
