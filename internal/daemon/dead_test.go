package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/internal/daemon"
)

// TestDeadLetterRoutesRefuseWildcardTypes: ?type= must be a job type:
// DELETE /v1/dead?type=> (or *) is refused naming the field, and purges
// nothing. On 47bb46e it was passed to the subject filter as it was and
// purged every type's dead letters. A dead letter coalesce cannot decode
// is refused with 422 unreplayable, not 503.
func TestDeadLetterRoutesRefuseWildcardTypes(t *testing.T) {
	t.Parallel()
	dead := &admin.Dead{}
	f := newAPIWith(t, func(c *daemon.APIConfig) {
		dead.Stream, dead.Subjects = c.Publisher.Stream(), c.Publisher.Subjects()
		c.Dead = dead
	})
	dead.JS = f.js // the API holds dead: set before any request
	ctx := context.Background()
	for _, typ := range []string{"recompute", "notify"} {
		m := nats.NewMsg("co.dead." + typ)
		m.Header.Set("Coalesce-Error", "test")
		m.Data = []byte(`{}`)
		if _, err := f.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range []string{">", "*", "recompute.>", "a..b", "a.", "_ingest.>"} {
		code, out := f.do(t, http.MethodDelete, "/v1/dead?type="+url.QueryEscape(typ), "")
		var e errBody
		_ = json.Unmarshal(out, &e)
		if code != http.StatusBadRequest || e.Error.Field != "type" {
			t.Errorf("DELETE /v1/dead?type=%s: %d %s, want 400 naming type", typ, code, out)
		}
	}
	code, out := f.do(t, http.MethodGet, "/v1/dead", "")
	var list struct {
		DeadLetters []admin.DeadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal(out, &list); code != 200 || err != nil || len(list.DeadLetters) != 2 {
		t.Fatalf("after the refused purges: %d %s, want both dead letters", code, out)
	}
	// The dead letters above carry no job headers: not replayable.
	code, out = f.do(t, http.MethodPost, "/v1/dead/"+strconv.FormatUint(list.DeadLetters[0].Seq, 10)+"/replay", "")
	var e errBody
	_ = json.Unmarshal(out, &e)
	if code != http.StatusUnprocessableEntity || e.Error.Code != "unreplayable" {
		t.Errorf("replay of an undecodable dead letter: %d %s, want 422 unreplayable", code, out)
	}
	if code, out := f.do(t, http.MethodDelete, "/v1/dead?type=notify", ""); code != 200 || string(out) != `{"purged":1}`+"\n" {
		t.Errorf("purge of a type: %d %s", code, out)
	}
}
