package chaos

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// OKCount is the number of (endpoint, webhook-id) pairs answered 2xx at
// least once: a retried id counts once, an id refused every time not at
// all. hookbench's progress line reads it every second instead of copying
// FirstOK.
func TestOKCountCountsFirst2xxPairs(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	r, err := StartReceiver(ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	okURL, err := r.Add(EndpointSpec{ID: "ok", Secret: secret, Behave: BehaveOK})
	if err != nil {
		t.Fatal(err)
	}
	badURL, err := r.Add(EndpointSpec{ID: "bad", Secret: secret, Behave: Behave5xx, FailAttempts: -1})
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	post := func(url, id string) int {
		body := `{"id":"` + id + `"}`
		now := time.Now()
		sig, err := wh.Sign(id, now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		url, id string
		want    int
	}{{okURL, "evt_1", 200}, {okURL, "evt_1", 200}, {okURL, "evt_2", 200}, {badURL, "evt_1", 503}} {
		if got := post(c.url, c.id); got != c.want {
			t.Fatalf("POST %s %s: %d, want %d", c.url, c.id, got, c.want)
		}
	}
	if got, want := r.OKCount(), len(r.FirstOK()); got != 2 || want != 2 {
		t.Fatalf("OKCount %d, len(FirstOK) %d, want 2 and 2", got, want)
	}
}
