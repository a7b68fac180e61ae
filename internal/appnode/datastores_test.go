package appnode_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/seal"
)

const dsSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

// TestDatastores: a team admin registers a datastore; its secret key is
// in no answer (create, list, get, credentials, audit) and is stored
// sealed with the app-node's key file, bound to the team and alias; the
// team's members and viewers read it, not change it; another team neither
// sees it nor finds its alias; a taken alias is 409; the credentials are
// replaced and the datastore removed (docs/data.md).
func TestDatastores(t *testing.T) {
	e := appnodetest.NewEnv(t)
	adam := e.AddUser(t, "adam", "ml", cosmic.RoleAdmin)
	mia := e.AddUser(t, "mia", "ml", cosmic.RoleMember)
	vic := e.AddUser(t, "vic", "ml", cosmic.RoleViewer)
	wes := e.AddUser(t, "wes", "web", cosmic.RoleAdmin)

	body := `{"alias":"main","endpoint":"https://s3.example.net/","credentials":{"accessKey":"AKIAIOSFODNN7EXAMPLE","secretKey":"` + dsSecret + `"}}`
	if a := call(t, e, "POST", "/api/v1/datastores", mia, body); a.status != http.StatusForbidden {
		t.Errorf("a member registers a datastore: %d %s", a.status, a.body)
	}
	a := call(t, e, "POST", "/api/v1/datastores", adam, body)
	if a.status != http.StatusCreated {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	var d apiv1.Datastore
	a.decode(t, &d)
	want := apiv1.Datastore{Alias: "main", Team: "ml", Type: "s3", Endpoint: "https://s3.example.net", Region: "us-east-1", AccessKeyHint: "…MPLE", CreatedBy: "adam"}
	d.CreatedAt = want.CreatedAt
	if d != want {
		t.Errorf("created %+v, want %+v", d, want)
	}
	answers := []string{string(a.body)}
	if a := call(t, e, "POST", "/api/v1/datastores", adam, body); a.status != http.StatusConflict {
		t.Errorf("the alias again: %d %s", a.status, a.body)
	}
	for _, tok := range []string{adam, mia, vic} {
		a := call(t, e, "GET", "/api/v1/datastores", tok, "")
		var l apiv1.DatastoreList
		a.decode(t, &l)
		if a.status != 200 || l.Total != 1 || len(l.Items) != 1 || l.Items[0].Alias != "main" {
			t.Errorf("list: %d %s", a.status, a.body)
		}
		g := call(t, e, "GET", "/api/v1/datastores/main", tok, "")
		if g.status != 200 {
			t.Errorf("get: %d %s", g.status, g.body)
		}
		answers = append(answers, string(a.body), string(g.body))
	}
	// Another team: nothing listed, the alias not found, not deletable.
	var l apiv1.DatastoreList
	call(t, e, "GET", "/api/v1/datastores", wes, "").decode(t, &l)
	if l.Total != 0 {
		t.Errorf("another team lists %+v", l)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if a := call(t, e, m, "/api/v1/datastores/main", wes, ""); a.status != http.StatusNotFound {
			t.Errorf("another team's %s: %d %s", m, a.status, a.body)
		}
	}
	if a := call(t, e, "PUT", "/api/v1/datastores/main/credentials", wes, `{"accessKey":"X1234567890","secretKey":"y"}`); a.status != http.StatusNotFound {
		t.Errorf("another team replaces the credentials: %d %s", a.status, a.body)
	}
	if a := call(t, e, "POST", "/api/v1/datastores", adam, strings.Replace(body, `"alias":"main"`, `"alias":"w","team":"web"`, 1)); a.status != http.StatusNotFound {
		t.Errorf("an admin of ml registers one for web: %d %s", a.status, a.body)
	}
	// wes may use the alias in his own team.
	if a := call(t, e, "POST", "/api/v1/datastores", wes, body); a.status != http.StatusCreated {
		t.Errorf("another team's own main: %d %s", a.status, a.body)
	}

	// Stored sealed, bound to team and alias, with the key file.
	ctx := context.Background()
	stored, err := e.Accounts.GetDatastore(ctx, "ml", "main")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored.SealedSecret), dsSecret) || len(stored.SealedSecret) == 0 {
		t.Fatalf("the stored secret is not sealed: %q", stored.SealedSecret)
	}
	key, err := seal.Load(filepath.Join(e.DataDir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := key.Open(stored.SealedSecret, []byte("datastore\x00ml\x00main")); err != nil || string(got) != dsSecret {
		t.Fatalf("open the stored secret: %q, %v", got, err)
	}
	if _, err := key.Open(stored.SealedSecret, []byte("datastore\x00web\x00main")); err == nil {
		t.Error("ml's sealed secret opens as web's")
	}

	// New credentials: a member may not; the admin may; the hint follows.
	if a := call(t, e, "PUT", "/api/v1/datastores/main/credentials", mia, `{"accessKey":"AKIANEWKEY00001","secretKey":"s2"}`); a.status != http.StatusForbidden {
		t.Errorf("a member replaces the credentials: %d %s", a.status, a.body)
	}
	a = call(t, e, "PUT", "/api/v1/datastores/main/credentials", adam, `{"accessKey":"AKIANEWKEY00001","secretKey":"`+dsSecret+`2"}`)
	a.decode(t, &d)
	if a.status != 200 || d.AccessKeyHint != "…0001" || d.UpdatedAt.IsZero() {
		t.Errorf("replace the credentials: %d %s", a.status, a.body)
	}
	answers = append(answers, string(a.body))
	if a := call(t, e, "PUT", "/api/v1/datastores/main/credentials", adam, `{"accessKey":"","secretKey":"x y"}`); a.status != 400 ||
		!strings.Contains(string(a.body), `"accessKey"`) || !strings.Contains(string(a.body), `"secretKey"`) {
		t.Errorf("bad credentials: %d %s", a.status, a.body)
	}

	// The audit log names the acts, never the secret.
	au := call(t, e, "GET", "/api/v1/audit", adam, "")
	if au.status != 200 || !strings.Contains(string(au.body), "createDatastore") || !strings.Contains(string(au.body), "setDatastoreCredentials") {
		t.Errorf("audit: %d %s", au.status, au.body)
	}
	answers = append(answers, string(au.body))
	for _, b := range answers {
		if strings.Contains(b, dsSecret) || strings.Contains(b, "AKIAIOSFODNN7EXAMPLE") {
			t.Fatalf("an answer carries a credential: %s", b)
		}
	}

	if a := call(t, e, "DELETE", "/api/v1/datastores/main", mia, ""); a.status != http.StatusForbidden {
		t.Errorf("a member removes it: %d %s", a.status, a.body)
	}
	if a := call(t, e, "DELETE", "/api/v1/datastores/main", adam, ""); a.status != http.StatusNoContent {
		t.Errorf("remove: %d %s", a.status, a.body)
	}
	if a := call(t, e, "GET", "/api/v1/datastores/main", adam, ""); a.status != http.StatusNotFound {
		t.Errorf("removed, then get: %d %s", a.status, a.body)
	}
}

// TestDatastoreInput: each field's refusal names it, and nothing is
// stored.
func TestDatastoreInput(t *testing.T) {
	e := appnodetest.NewEnv(t)
	adam := e.AddUser(t, "adam", "ml", cosmic.RoleAdmin)
	creds := `"credentials":{"accessKey":"AK123456789","secretKey":"sk"}`
	for _, c := range []struct{ body, field, says string }{
		{`{"alias":"Main","endpoint":"https://s3.example.net",` + creds + `}`, "alias", "lowercase"},
		{`{"alias":"m","endpoint":"ftp://s3.example.net",` + creds + `}`, "endpoint", "http or https"},
		{`{"alias":"m","endpoint":"https://s3.example.net/bucket",` + creds + `}`, "endpoint", "container, prefix"},
		{`{"alias":"m","endpoint":"https://u:p@s3.example.net",` + creds + `}`, "endpoint", "credentials"},
		{`{"alias":"m","endpoint":"https://s3.example.net?x=1",` + creds + `}`, "endpoint", "alone"},
		{`{"alias":"m","endpoint":"s3.example.net",` + creds + `}`, "endpoint", "http or https"},
		{`{"alias":"m",` + creds + `}`, "endpoint", "required"},
		{`{"alias":"m","endpoint":"https://s3.example.net","type":"gcs",` + creds + `}`, "type", "want s3"},
		{`{"alias":"m","endpoint":"https://s3.example.net","region":"eu west",` + creds + `}`, "region", "letters"},
		{`{"alias":"m","endpoint":"https://s3.example.net","credentials":{"accessKey":"AK"}}`, "credentials.secretKey", "required"},
		{`{"alias":"m","endpoint":"https://s3.example.net","credentials":{"accessKey":"A K","secretKey":"s"}}`, "credentials.accessKey", "printable"},
	} {
		a := call(t, e, "POST", "/api/v1/datastores", adam, c.body)
		if a.status != 400 || !strings.Contains(string(a.body), `"`+c.field+`"`) || !strings.Contains(string(a.body), c.says) {
			t.Errorf("%s: %d %s; want 400 naming %s (%q)", c.body, a.status, a.body, c.field, c.says)
		}
	}
	if a := call(t, e, "POST", "/api/v1/datastores", adam, `{"alias":"m","endpoint":"https://x","credentials":{"accessKey":"a","secretKey":"b"},"secret":"x"}`); a.status != 400 {
		t.Errorf("an unknown field: %d %s", a.status, a.body)
	}
	if l, _ := e.Accounts.ListDatastores(context.Background(), ""); len(l) != 0 {
		t.Errorf("refused, yet stored: %+v", l)
	}
}

// TestVolumesNameTheTeamsDatastores: a job's volume (its source or its
// push target) names a datastore of the job's team: one the team does not
// have, another team's among them, is refused at create with the field,
// and no job is made; OVH's shorthand of a volume is taken.
func TestVolumesNameTheTeamsDatastores(t *testing.T) {
	e := appnodetest.NewEnv(t)
	adam := e.AddUser(t, "adam", "ml", cosmic.RoleAdmin)
	wes := e.AddUser(t, "wes", "web", cosmic.RoleAdmin)
	ds := `{"alias":"%s","endpoint":"https://s3.example.net","credentials":{"accessKey":"AK123456789","secretKey":"s"}}`
	if a := call(t, e, "POST", "/api/v1/datastores", adam, fmt.Sprintf(ds, "main")); a.status != 201 {
		t.Fatal(a.status, string(a.body))
	}
	if a := call(t, e, "POST", "/api/v1/datastores", wes, fmt.Sprintf(ds, "webdata")); a.status != 201 {
		t.Fatal(a.status, string(a.body))
	}
	job := func(volumes string) string {
		return `{"type":"gpu-container","name":"v","location":"us","image":"ubuntu:24.04","volumes":[` + volumes + `]}`
	}
	a := call(t, e, "POST", "/api/v1/jobs", adam, job(`{"mountPath":"/in","dataStore":{"alias":"webdata","container":"bkt"}},
		{"mountPath":"/out","permission":"RW","volumeSource":{"dataStore":{"alias":"main","container":"bkt"}},"targetDataStore":{"alias":"nope","container":"res"}}`))
	if a.status != 400 || !strings.Contains(string(a.body), `"volumes[0].volumeSource.dataStore.alias"`) || !strings.Contains(string(a.body), `"volumes[1].volumeTarget.targetDataStore.alias"`) ||
		!strings.Contains(string(a.body), "team ml has no datastore webdata") {
		t.Errorf("unknown aliases: %d %s", a.status, a.body)
	}
	if n := e.Ork.Jobs(); n != 0 {
		t.Fatalf("%d jobs made from refused creates", n)
	}
	a = call(t, e, "POST", "/api/v1/jobs", adam, job(`{"mountPath":"/in","permission":"rw","dataStore":{"alias":"main","container":"bkt","prefix":"data/"}}`))
	if a.status != 201 {
		t.Fatalf("a volume of the team's datastore: %d %s", a.status, a.body)
	}
	var j cosmic.Job
	a.decode(t, &j)
	if v := j.Spec.Volumes; len(v) != 1 || v[0].Permission != "RW" || v[0].Source.DataStore == nil || v[0].Source.DataStore.Prefix != "data/" {
		t.Errorf("stored volumes %+v", v)
	}
}
