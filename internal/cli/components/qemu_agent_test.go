package components

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDefaultAgent: with no --agent-binary, a VM gets cosmicac-agent from
// beside the running binary (the agents alone); without one there, or with
// a directory of that name, the running binary itself.
func TestDefaultAgent(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "cosmicac")
	if got := defaultAgent(self); got != self {
		t.Errorf("no cosmicac-agent beside it: %s, want %s", got, self)
	}
	if err := os.Mkdir(filepath.Join(dir, "cosmicac-agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := defaultAgent(self); got != self {
		t.Errorf("a directory named cosmicac-agent: %s, want %s", got, self)
	}
	other := t.TempDir()
	self = filepath.Join(other, "cosmicac")
	agent := filepath.Join(other, "cosmicac-agent")
	if err := os.WriteFile(agent, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := defaultAgent(self); got != agent {
		t.Errorf("cosmicac-agent beside it: %s, want %s", got, agent)
	}
}
