package appnode

import (
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

func TestJobAgentKey(t *testing.T) {
	ids := make([]*fabric.Identity, 3)
	for i := range ids {
		id, err := fabric.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	var j cosmic.Job
	j.Status.Replicas = []cosmic.ReplicaStatus{
		{Index: 0, AgentKeys: []string{ids[0].PublicKey().String()}},
		{Index: 1},
	}
	cases := []struct {
		replica int
		key     fabric.PublicKey
		want    bool
	}{
		{0, ids[0].PublicKey(), true},
		{0, ids[1].PublicKey(), false}, // another key announcing the job
		{1, ids[0].PublicKey(), false}, // another replica's key
		{1, ids[2].PublicKey(), false}, // no key reported
		{2, ids[0].PublicKey(), false}, // no such replica
	}
	for _, c := range cases {
		if got := JobAgentKey(j, c.replica, c.key); got != c.want {
			t.Errorf("JobAgentKey(replica %d, %s) = %v, want %v", c.replica, c.key.Short(), got, c.want)
		}
	}
	if !hasAgentKeys(j, 0) || hasAgentKeys(j, 1) {
		t.Error("hasAgentKeys")
	}
}
