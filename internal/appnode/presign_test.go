package appnode

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/seal"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// capture is a fabric.Registrar that keeps the handlers registered on it.
type capture map[string]fabric.Handler

func (c capture) Handle(method string, h fabric.Handler, _ ...fabric.HandleOption) { c[method] = h }

// TestPresignConfinement: data.presign signs for a caller what its
// principal may have and nothing else, as docs/data.md and the trust
// graph say: a job's instance agent its own job's volumes, as each
// volume's permission allows, never another job's, never the model; an
// inference agent its job's model source only; a stopping agent no reads;
// no other role anything; a volume with no datastore side, or a datastore
// gone, is refused with a clear error and no request.
func TestPresignConfinement(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := seal.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTeam(ctx, cosmic.Team{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	for _, alias := range []string{"main", "gone"} {
		if err := st.CreateDatastore(ctx, store.Datastore{Team: "t", Alias: alias, Type: "s3", Endpoint: "http://127.0.0.1:9", Region: "us-east-1",
			AccessKey: "AKIAEXAMPLE", SealedSecret: sealSecret(key, "t", alias, "secret"), CreatedBy: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	ds := func(alias, prefix string) *cosmic.DataStoreSource {
		return &cosmic.DataStoreSource{Alias: alias, Container: "bucket", Prefix: prefix}
	}
	jobs := map[string]cosmic.Job{
		"c1": {ID: "c1", Team: "t", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer, Volumes: []cosmic.Volume{
			{MountPath: "/in", Permission: cosmic.PermissionRO, Source: cosmic.VolumeSource{DataStore: ds("main", "in")}},
			{MountPath: "/out", Permission: cosmic.PermissionRW, Source: cosmic.VolumeSource{DataStore: ds("main", "out")}},
			{MountPath: "/src", Source: cosmic.VolumeSource{PublicGit: &cosmic.PublicGitSource{URL: "https://git.example/r"}}},
			{MountPath: "/old", Source: cosmic.VolumeSource{DataStore: ds("gone", "x")}},
			{MountPath: "/scratch", Permission: cosmic.PermissionRW, Source: cosmic.VolumeSource{Standalone: &cosmic.StandaloneSource{Name: "scratch"}}},
		}}},
		"c2": {ID: "c2", Team: "t", Spec: cosmic.Spec{Type: cosmic.TypeGPUContainer}},
		"m1": {ID: "m1", Team: "t", Spec: cosmic.Spec{Type: cosmic.TypeManagedInference,
			Inference: &cosmic.InferenceSpec{Runtime: cosmic.RuntimeLlamaCPP, Model: "m", ModelSource: ds("main", "models/m")}}},
	}
	if err := st.DeleteDatastore(ctx, "t", "gone"); err != nil {
		t.Fatal(err)
	}
	getJob := func(_ context.Context, id string) (cosmic.Job, error) {
		if j, ok := jobs[id]; ok {
			return j, nil
		}
		return cosmic.Job{}, cosmic.ErrNotFound
	}
	reg := capture{}
	ServePresign(reg, getJob, st, key)
	h := reg[dataapi.Presign.Name]
	if h == nil {
		t.Fatal("ServePresign registered no data.presign")
	}
	instance := func(job string) *trust.Principal {
		return &trust.Principal{Role: trust.InstanceAgent, Job: job, Team: "t"}
	}
	stopping := instance("c1")
	stopping.Stopping = true
	for _, tt := range []struct {
		name   string
		caller *trust.Principal
		p      dataapi.PresignParams
		code   string // "" : signed
		says   string
	}{
		{"own RO volume, read", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpGet, Keys: []string{"a"}}, "", ""},
		{"own RO volume, listed", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpList}, "", ""},
		{"own RO volume, written", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpPut, Keys: []string{"a"}}, fabric.CodeBadRequest, "volume 0"},
		{"own RW volume, written", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 1, Op: datasync.OpPut, Keys: []string{"a"}}, "", ""},
		{"own RW volume, deleted (RWD only)", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 1, Op: datasync.OpDelete, Keys: []string{"a"}}, fabric.CodeBadRequest, "volume 1"},
		{"another job's volume", instance("c2"), dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpGet, Keys: []string{"a"}}, fabric.CodeForbidden, "its own job's"},
		{"the model, by an instance agent", instance("m1"), dataapi.PresignParams{Job: "m1", Model: true, Op: datasync.OpList}, fabric.CodeForbidden, "fills volumes"},
		{"a volume, by an inference agent", &trust.Principal{Role: trust.InferenceAgent, Job: "c1", Team: "t"}, dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpGet, Keys: []string{"a"}}, fabric.CodeForbidden, "model source"},
		{"the model, by its inference agent", &trust.Principal{Role: trust.InferenceAgent, Job: "m1", Team: "t"}, dataapi.PresignParams{Job: "m1", Model: true, Op: datasync.OpGet, Keys: []string{"w.gguf"}}, "", ""},
		{"the model, written", &trust.Principal{Role: trust.InferenceAgent, Job: "m1", Team: "t"}, dataapi.PresignParams{Job: "m1", Model: true, Op: datasync.OpPut, Keys: []string{"w.gguf"}}, fabric.CodeBadRequest, ""},
		{"a read while stopping", stopping, dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpGet, Keys: []string{"a"}}, fabric.CodeForbidden, "stopping"},
		{"a push while stopping", stopping, dataapi.PresignParams{Job: "c1", Volume: 1, Op: datasync.OpPut, Keys: []string{"a"}}, "", ""},
		{"a worker", &trust.Principal{Role: trust.Worker, Rack: "r"}, dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpGet, Keys: []string{"a"}}, fabric.CodeForbidden, ""},
		{"no such volume", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 9, Op: datasync.OpList}, fabric.CodeBadRequest, "no volume 9"},
		{"a Git volume", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 2, Op: datasync.OpList}, fabric.CodeBadRequest, "no volumeSource.dataStore"},
		{"a target it has not", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 1, Target: true, Op: datasync.OpPut, Keys: []string{"a"}}, fabric.CodeBadRequest, "volumeTarget"},
		{"a datastore removed", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 3, Op: datasync.OpList}, fabric.CodeNotFound, "no datastore gone"},
		{"a job gone", instance("c9"), dataapi.PresignParams{Job: "c9", Volume: 0, Op: datasync.OpList}, fabric.CodeNotFound, "job c9 not found"},
		{"a standalone volume", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 4, Op: datasync.OpList}, fabric.CodeBadRequest, "no volumeSource.dataStore"},
		{"a key out of the prefix", instance("c1"), dataapi.PresignParams{Job: "c1", Volume: 0, Op: datasync.OpGet, Keys: []string{"../other/a"}}, fabric.CodeBadRequest, "volume 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			params, _ := json.Marshal(tt.p)
			out, err := h(fabric.WithGrant(ctx, tt.caller), &fabric.Request{Method: dataapi.Presign.Name, Params: params})
			if tt.code == "" {
				reply, ok := out.(dataapi.PresignReply)
				if err != nil || !ok || len(reply.Requests) == 0 {
					t.Fatalf("%s: %v, %+v; want signed requests", tt.caller, err, out)
				}
				for _, r := range reply.Requests {
					if strings.Contains(r.URL, "secret") {
						t.Errorf("a signed request holds the secret key: %s", r.URL)
					}
				}
				return
			}
			var fe *fabric.Error
			if !errors.As(err, &fe) || fe.Code != tt.code || !strings.Contains(fe.Message, tt.says) {
				t.Fatalf("%s: %v (%+v), want %s saying %q", tt.caller, err, out, tt.code, tt.says)
			}
		})
	}
}
