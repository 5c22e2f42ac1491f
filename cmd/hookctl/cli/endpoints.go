package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// EndpointsCmd groups the endpoint commands.
type EndpointsCmd struct {
	Add          EndpointsAddCmd     `cmd:"" help:"Create an endpoint; prints its signing secret once."`
	List         EndpointsListCmd    `cmd:"" help:"List endpoints."`
	Show         EndpointsShowCmd    `cmd:"" help:"Show one endpoint."`
	Update       EndpointsUpdateCmd  `cmd:"" help:"Change an endpoint's URL, event types, description, limits, custom headers, payload filter, client certificate or ordering."`
	Disable      EndpointsDisableCmd `cmd:"" help:"Stop sending to an endpoint (its deliveries are dead-lettered as endpoint_disabled; resend them after enable)."`
	Enable       EndpointsEnableCmd  `cmd:"" help:"Resume sending to a disabled endpoint (replay what it missed with hookctl dlq replay)."`
	RotateSecret EndpointsRotateCmd  `cmd:"" name:"rotate-secret" help:"Start a secret rotation (new secret first, the previous one still signs) or finish it with --finish."`
	Delete       EndpointsDeleteCmd  `cmd:"" help:"Delete an endpoint."`
	Resend       EndpointsResendCmd  `cmd:"" help:"Re-deliver what the endpoint missed since a time (its dead letters), resumable and audited."`
}

// endpointView is an endpoint as printed: secrets masked unless asked for.
type endpointView struct {
	endpoint.Endpoint
	// Secret is the new signing secret, printed once by add and
	// rotate-secret.
	Secret string `json:"secret,omitempty"`
	// PublicKeys are the whpk_ keys of its ed25519 signing keys.
	PublicKeys []string `json:"public_keys,omitempty"`
}

func view(e endpoint.Endpoint, showSecrets bool) endpointView {
	pub := e.PublicKeys()
	if !showSecrets {
		masked := make([]string, len(e.Secrets))
		for i, s := range e.Secrets {
			masked[i] = endpoint.MaskSecret(s)
		}
		e.Secrets = masked
	}
	return endpointView{Endpoint: e, PublicKeys: pub}
}

func printEndpoint(g *Globals, v endpointView) error {
	if g.JSON() {
		return g.PrintJSON(v)
	}
	tw := g.Table()
	types := "* (all)"
	if len(v.EventTypes) > 0 {
		types = strings.Join(v.EventTypes, ", ")
	}
	rows := [][2]string{
		{"id", v.ID}, {"account", v.Account}, {"url", v.URL}, {"status", string(v.Status)},
		{"event types", types}, {"secrets", strings.Join(v.Secrets, " ")},
	}
	for _, pk := range v.PublicKeys {
		rows = append(rows, [2]string{"public key", pk})
	}
	if v.Description != "" {
		rows = append(rows, [2]string{"description", v.Description})
	}
	if v.MaxInFlight > 0 {
		rows = append(rows, [2]string{"max in flight", fmt.Sprint(v.MaxInFlight)})
	}
	if v.Timeout > 0 {
		rows = append(rows, [2]string{"timeout", v.Timeout.String()})
	}
	if v.RatePerSec > 0 {
		rows = append(rows, [2]string{"rate", fmt.Sprintf("%g/s", v.RatePerSec)})
	}
	if !v.FailingSince.IsZero() {
		rows = append(rows, [2]string{"failing since", v.FailingSince.UTC().Format(time.RFC3339)})
	}
	if v.DisabledReason != "" {
		rows = append(rows, [2]string{"disabled", v.DisabledReason + " at " + v.DisabledAt.UTC().Format(time.RFC3339)})
	}
	for _, name := range slices.Sorted(maps.Keys(v.Headers)) {
		rows = append(rows, [2]string{"header", name + ": " + v.Headers[name]})
	}
	if len(v.Filter) > 0 {
		rows = append(rows, [2]string{"filter", string(v.Filter)})
	}
	if v.FIFO() {
		rows = append(rows, [2]string{"ordering", string(endpoint.OrderingFIFO) + " (one at a time, in order)"})
	}
	if info, ok := v.ClientCertInfo(); ok {
		rows = append(rows, [2]string{"client cert", info.Subject + ", expires " + info.NotAfter.UTC().Format(time.RFC3339)})
	}
	if v.SendTraceparent {
		rows = append(rows, [2]string{"traceparent", "sent (when tracing is on)"})
	}
	rows = append(rows, [2]string{"created", v.CreatedAt.UTC().Format(time.RFC3339)}, [2]string{"updated", v.UpdatedAt.UTC().Format(time.RFC3339)})
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.Secret != "" {
		fmt.Fprintf(g.Out(), "\nsigning secret (shown once, store it now): %s\n", v.Secret)
	}
	return nil
}

// endpointError turns store and validation errors into exit codes: bad
// input and unknown ids are usage errors (exit 2).
func endpointError(err error) error {
	if errors.Is(err, endpoint.ErrInvalid) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAlreadyExists) {
		return Usage(err)
	}
	return err
}

// EndpointLimits are the per-endpoint limit flags shared by add and update.
type EndpointLimits struct {
	MaxInFlight *int           `name:"max-in-flight" help:"Requests in flight to this endpoint (0: the dispatcher's default)."`
	Timeout     *time.Duration `name:"timeout" help:"Total request timeout for this endpoint, e.g. 5s (0: the dispatcher's default)."`
	Rate        *float64       `name:"rate" help:"Requests per second to this endpoint (0: unlimited)."`
}

func (l EndpointLimits) apply(e *endpoint.Endpoint) {
	if l.MaxInFlight != nil {
		e.MaxInFlight = *l.MaxInFlight
	}
	if l.Timeout != nil {
		e.Timeout = *l.Timeout
	}
	if l.Rate != nil {
		e.RatePerSec = *l.Rate
	}
}

// EndpointHeaders is the custom-header flag of add and update.
type EndpointHeaders struct {
	Header []string `name:"header" sep:"none" placeholder:"'NAME: VALUE'" help:"A custom header sent with every request, repeatable; at most 20, no webhook-*, content-*, host, user-agent or hop-by-hop name. On update it adds the header or replaces the one of that name."`
}

// set adds or replaces the --header flags' headers in h (names compared
// without case, as HTTP does) and returns it; a name given twice is a
// usage error.
func (f EndpointHeaders) set(h map[string]string) (map[string]string, error) {
	given := map[string]bool{}
	for _, line := range f.Header {
		name, value, err := endpoint.ParseHeaderLine(line)
		if err != nil {
			return nil, Usage(fmt.Errorf("--header: %w", err))
		}
		if given[strings.ToLower(name)] {
			return nil, Usage(fmt.Errorf("--header: %s given twice", name))
		}
		given[strings.ToLower(name)] = true
		if h == nil {
			h = map[string]string{}
		}
		maps.DeleteFunc(h, func(k, _ string) bool { return strings.EqualFold(k, name) })
		h[name] = value
	}
	return h, nil
}

// EndpointFilter is the payload filter flag of add and update.
type EndpointFilter struct {
	Filter *string `name:"filter" placeholder:"JSON" help:"Payload filter: deliver only the events that match it, e.g. '{\"data\": {\"amount\": {\"$gte\": 100}}}' (docs/api.md, Payload filters). On update, '{}' removes it."`
}

// set checks --filter and stores it in e; without the flag e is left.
func (f EndpointFilter) set(e *endpoint.Endpoint) error {
	if f.Filter == nil {
		return nil
	}
	if _, err := endpoint.ParseFilter([]byte(*f.Filter)); err != nil {
		return Usage(fmt.Errorf("--filter: %w", err))
	}
	e.Filter = endpoint.NormalizeFilter([]byte(*f.Filter))
	return nil
}

// EndpointClientCert is the mutual TLS flags of add and update.
type EndpointClientCert struct {
	ClientCert string `name:"client-cert" type:"existingfile" placeholder:"FILE" help:"PEM client certificate (chain) presented when the receiver asks for one (mutual TLS); with --client-key. Its key is stored encrypted like the secrets."`
	ClientKey  string `name:"client-key" type:"existingfile" placeholder:"FILE" help:"PEM private key of --client-cert."`
}

// set reads the certificate and key files into e, checked (they must
// match and not have expired); without the flags e is left.
func (f EndpointClientCert) set(e *endpoint.Endpoint) error {
	if f.ClientCert == "" && f.ClientKey == "" {
		return nil
	}
	if f.ClientCert == "" || f.ClientKey == "" {
		return Usage(errors.New("--client-cert and --client-key: give both"))
	}
	cert, err := os.ReadFile(f.ClientCert)
	if err != nil {
		return Usage(fmt.Errorf("--client-cert: %w", err))
	}
	key, err := os.ReadFile(f.ClientKey)
	if err != nil {
		return Usage(fmt.Errorf("--client-key: %w", err))
	}
	if _, err := endpoint.ParseClientCert(string(cert), string(key), time.Now()); err != nil {
		return Usage(err)
	}
	e.ClientCert, e.ClientKey = string(cert), string(key)
	return nil
}

// EndpointOrdering is the ordering flag of add and update.
type EndpointOrdering struct {
	Ordering *string `name:"ordering" placeholder:"fifo|none" help:"fifo: one request at a time, in commit order; a failure is retried in place and the later deliveries wait (head-of-line blocking; docs/api.md, Ordered delivery). none (the default): concurrent, retries through the retry tiers."`
}

// set checks --ordering and stores it in e; without the flag e is left.
func (f EndpointOrdering) set(e *endpoint.Endpoint) error {
	if f.Ordering == nil {
		return nil
	}
	o := endpoint.Ordering(*f.Ordering)
	if o == "" {
		o = "(empty)"
	}
	if err := endpoint.ValidateOrdering(o); err != nil {
		return Usage(fmt.Errorf("--ordering: %w", err))
	}
	e.Ordering = o
	return nil
}

// PrivateNetworks is the SSRF switch of add and update.
type PrivateNetworks struct {
	AllowPrivateNetworks bool `name:"allow-private-networks" env:"HOOKD_ALLOW_PRIVATE_NETWORKS" help:"Accept a URL whose host is, or resolves to, a private, loopback, link-local, metadata or other special-purpose address (development only; hookd must run with --allow-private-networks too to send there)."`
}

// check refuses, as a usage error, a URL whose host is or resolves to an
// address hookd's SSRF guard refuses, unless private networks are allowed.
// A name that does not resolve is accepted (see ssrf.CheckURL).
func (p PrivateNetworks) check(ctx context.Context, rawURL string) error {
	if p.AllowPrivateNetworks {
		return nil
	}
	// Judge the host as net/http will dial it: "http://127。0。0。1/" is
	// loopback (endpoint.NormalizeURL, as the API does).
	if n, err := endpoint.NormalizeURL(rawURL); err == nil {
		rawURL = n
	}
	err := ssrf.CheckURL(ctx, nil, rawURL)
	switch {
	case errors.Is(err, ssrf.ErrRefused):
		return Usage(fmt.Errorf("url: %w; hookd refuses private destinations: pass --allow-private-networks (and run hookd with it) to allow them", err))
	case err != nil:
		return Usage(fmt.Errorf("url: %w", err))
	}
	return nil
}

// EndpointsAddCmd creates an endpoint.
type EndpointsAddCmd struct {
	Account         string   `name:"account" required:"" help:"Account whose events the endpoint receives."`
	URL             string   `name:"url" required:"" help:"Where deliveries are POSTed (http or https)."`
	ID              string   `name:"id" help:"Endpoint id; generated (ep_...) when empty."`
	Secret          string   `name:"secret" help:"Signing secret (whsec_<base64>, or whsk_<base64> for an ed25519 key); generated when empty."`
	SignatureScheme string   `name:"signature-scheme" enum:"hmac-sha256,ed25519" default:"hmac-sha256" help:"The kind of key generated when --secret is empty: hmac-sha256 (v1 signatures; the secret is printed once) or ed25519 (v1a; hookd keeps the private key, show prints the whpk_ public key to verify with)."`
	EventTypes      []string `name:"event-type" sep:"," help:"Event types to receive, repeatable or comma-separated; '*' wildcards (invoice.*); required: '*' for all."`
	Description     string   `name:"description" help:"Free text."`
	Disabled        bool     `name:"disabled" help:"Create it disabled."`
	EndpointLimits
	EndpointHeaders
	EndpointFilter
	EndpointClientCert
	EndpointOrdering
	PrivateNetworks

	SendTraceparent bool `name:"send-traceparent" help:"Send each request's traceparent header (W3C trace context of its attempt's span) when hookd's tracing is on."`
}

// Run implements `hookctl endpoints add`.
func (c *EndpointsAddCmd) Run(ctx context.Context, g *Globals) error {
	if len(c.EventTypes) == 0 {
		return Usage(errors.New("--event-type: required: name the event types to receive, or pass --event-type '*' for all"))
	}
	e := endpoint.Endpoint{ID: c.ID, Account: c.Account, URL: c.URL, Description: c.Description, EventTypes: c.EventTypes,
		Status: endpoint.StatusActive}
	if e.ID == "" {
		e.ID = endpoint.NewID()
	}
	secret := c.Secret
	if secret == "" {
		var err error
		if secret, err = endpoint.NewSigningKey(c.SignatureScheme); err != nil {
			return Usage(err)
		}
	}
	e.Secrets = []string{secret}
	if c.Disabled {
		e.Status, e.DisabledReason, e.DisabledAt = endpoint.StatusDisabled, "created disabled", time.Now()
	}
	c.EndpointLimits.apply(&e)
	var err error
	if e.Headers, err = c.EndpointHeaders.set(nil); err != nil {
		return err
	}
	if err := c.EndpointFilter.set(&e); err != nil {
		return err
	}
	if err := c.EndpointOrdering.set(&e); err != nil {
		return err
	}
	if err := c.EndpointClientCert.set(&e); err != nil {
		return err
	}
	e.SendTraceparent = c.SendTraceparent
	if err := e.Validate(); err != nil {
		return Usage(err)
	}
	if err := c.PrivateNetworks.check(ctx, e.URL); err != nil {
		return err
	}
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	out, err := st.CreateEndpoint(ctx, e)
	if err != nil {
		return endpointError(err)
	}
	v := view(out, false)
	v.Secret = shownOnce(secret)
	return printEndpoint(g, v)
}

// shownOnce is what add and rotate-secret print of a new key: a shared
// secret once, an ed25519 private key never (its public key is shown).
func shownOnce(secret string) string {
	if endpoint.IsPrivateKey(secret) {
		return ""
	}
	return secret
}

// EndpointsListCmd lists endpoints.
type EndpointsListCmd struct {
	Account string `name:"account" help:"Only this account's endpoints."`
	Status  string `name:"status" enum:",active,disabled" default:"" help:"Only endpoints with this status: active or disabled."`
	Limit   int    `name:"limit" default:"1000" help:"At most this many endpoints (0: all)."`
}

// Run implements `hookctl endpoints list`.
func (c *EndpointsListCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	eps, err := st.ListEndpoints(ctx, store.ListEndpointsParams{Account: c.Account, Status: endpoint.Status(c.Status), Limit: c.Limit})
	if err != nil {
		return err
	}
	views := make([]endpointView, len(eps))
	for i, e := range eps {
		views[i] = view(e, false)
	}
	if g.JSON() {
		return g.PrintJSON(views)
	}
	tw := g.Table()
	fmt.Fprintln(tw, "ID\tACCOUNT\tSTATUS\tEVENT TYPES\tURL")
	for _, v := range views {
		types := "*"
		if len(v.EventTypes) > 0 {
			types = strings.Join(v.EventTypes, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.ID, v.Account, v.Status, types, v.URL)
	}
	return tw.Flush()
}

// EndpointsShowCmd shows one endpoint.
type EndpointsShowCmd struct {
	ID          string `arg:"" help:"Endpoint id."`
	ShowSecrets bool   `name:"show-secrets" help:"Print the signing secrets in full."`
}

// Run implements `hookctl endpoints show`.
func (c *EndpointsShowCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	e, err := st.GetEndpoint(ctx, c.ID)
	if err != nil {
		return endpointError(err)
	}
	return printEndpoint(g, view(e, c.ShowSecrets))
}

// modify runs change on endpoint id and prints the result.
func modify(ctx context.Context, g *Globals, id string, change func(*endpoint.Endpoint) error) (endpoint.Endpoint, error) {
	st, err := g.Store(ctx)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	defer st.Close()
	e, err := st.ModifyEndpoint(ctx, id, change)
	if err != nil {
		return e, endpointError(err)
	}
	return e, nil
}

// EndpointsUpdateCmd changes an endpoint.
type EndpointsUpdateCmd struct {
	ID            string    `arg:"" help:"Endpoint id."`
	URL           *string   `name:"url" help:"New URL."`
	EventTypes    *[]string `name:"event-type" sep:"," help:"Replace the event types (repeatable or comma-separated; '*' wildcards)."`
	AllEventTypes bool      `name:"all-event-types" help:"Receive every event type (clears the list)."`
	Description   *string   `name:"description" help:"New description."`
	EndpointLimits
	EndpointHeaders
	RemoveHeader []string `name:"remove-header" sep:"none" placeholder:"NAME" help:"Stop sending this custom header (any case), repeatable."`
	ClearHeaders bool     `name:"clear-headers" help:"Stop sending every custom header (before any --header is added)."`
	EndpointFilter
	EndpointClientCert
	ClearClientCert bool `name:"clear-client-cert" help:"Stop presenting a client certificate (before any --client-cert is set)."`
	EndpointOrdering
	PrivateNetworks

	SendTraceparent *bool `name:"send-traceparent" negatable:"" help:"Send (or, with --no-send-traceparent, stop sending) each request's traceparent header when hookd's tracing is on."`
}

// Run implements `hookctl endpoints update`.
func (c *EndpointsUpdateCmd) Run(ctx context.Context, g *Globals) error {
	if c.AllEventTypes && c.EventTypes != nil {
		return Usage(errors.New("--event-type and --all-event-types contradict each other"))
	}
	if c.URL != nil {
		if err := endpoint.ValidateURL(*c.URL); err != nil {
			return Usage(err)
		}
		if err := c.PrivateNetworks.check(ctx, *c.URL); err != nil {
			return err
		}
	}
	e, err := modify(ctx, g, c.ID, func(e *endpoint.Endpoint) error {
		if c.URL != nil {
			e.URL = *c.URL
		}
		if c.EventTypes != nil {
			e.EventTypes = *c.EventTypes
		}
		if c.AllEventTypes {
			e.EventTypes = []string{}
		}
		if c.Description != nil {
			e.Description = *c.Description
		}
		c.EndpointLimits.apply(e)
		if err := c.EndpointFilter.set(e); err != nil {
			return err
		}
		if err := c.EndpointOrdering.set(e); err != nil {
			return err
		}
		if c.ClearClientCert {
			e.ClientCert, e.ClientKey = "", ""
		}
		if err := c.EndpointClientCert.set(e); err != nil {
			return err
		}
		if c.SendTraceparent != nil {
			e.SendTraceparent = *c.SendTraceparent
		}
		return c.changeHeaders(e)
	})
	if err != nil {
		return err
	}
	return printEndpoint(g, view(e, false))
}

// changeHeaders applies --clear-headers, then --remove-header, then
// --header to e.
func (c *EndpointsUpdateCmd) changeHeaders(e *endpoint.Endpoint) error {
	if c.ClearHeaders {
		e.Headers = nil
	}
	for _, name := range c.RemoveHeader {
		n := len(e.Headers)
		maps.DeleteFunc(e.Headers, func(k, _ string) bool { return strings.EqualFold(k, name) })
		if len(e.Headers) == n {
			return Usage(fmt.Errorf("--remove-header: endpoint %s has no header %q", e.ID, name))
		}
	}
	h, err := c.EndpointHeaders.set(e.Headers)
	e.Headers = h
	return err
}

// EndpointsDisableCmd disables an endpoint.
type EndpointsDisableCmd struct {
	ID     string `arg:"" help:"Endpoint id."`
	Reason string `name:"reason" default:"disabled by an operator" help:"Why, recorded on the endpoint."`
}

// Run implements `hookctl endpoints disable`.
func (c *EndpointsDisableCmd) Run(ctx context.Context, g *Globals) error {
	e, err := modify(ctx, g, c.ID, func(e *endpoint.Endpoint) error {
		e.Status, e.DisabledReason, e.DisabledAt = endpoint.StatusDisabled, c.Reason, time.Now()
		return nil
	})
	if err != nil {
		return err
	}
	return printEndpoint(g, view(e, false))
}

// EndpointsEnableCmd enables an endpoint.
type EndpointsEnableCmd struct {
	ID string `arg:"" help:"Endpoint id."`
}

// Run implements `hookctl endpoints enable`.
func (c *EndpointsEnableCmd) Run(ctx context.Context, g *Globals) error {
	e, err := modify(ctx, g, c.ID, func(e *endpoint.Endpoint) error {
		e.Status, e.DisabledReason, e.DisabledAt, e.FailingSince = endpoint.StatusActive, "", time.Time{}, time.Time{}
		return nil
	})
	if err != nil {
		return err
	}
	return printEndpoint(g, view(e, false))
}

// EndpointsRotateCmd rotates an endpoint's signing secret.
type EndpointsRotateCmd struct {
	ID              string `arg:"" help:"Endpoint id."`
	Secret          string `name:"secret" help:"The new secret (whsec_<base64>, or whsk_<base64> for an ed25519 key); generated when empty."`
	SignatureScheme string `name:"signature-scheme" enum:",hmac-sha256,ed25519" default:"" help:"The kind of key to generate: hmac-sha256 (v1) or ed25519 (v1a); the current key's kind when empty. Both keys sign until --finish, so receivers can switch kinds too."`
	Finish          bool   `name:"finish" help:"End the rotation: keep only the current secret."`
}

// Run implements `hookctl endpoints rotate-secret`.
func (c *EndpointsRotateCmd) Run(ctx context.Context, g *Globals) error {
	if c.Finish && c.Secret != "" {
		return Usage(errors.New("--finish and --secret contradict each other"))
	}
	secret := c.Secret
	e, err := modify(ctx, g, c.ID, func(e *endpoint.Endpoint) error {
		if c.Finish {
			e.Secrets = e.Secrets[:1]
			return nil
		}
		if secret == "" {
			scheme := c.SignatureScheme
			if scheme == "" {
				scheme = endpoint.SchemeOf(e.Secrets[0])
			}
			var err error
			if secret, err = endpoint.NewSigningKey(scheme); err != nil {
				return Usage(err)
			}
		}
		// New first; the previous current secret keeps signing so that
		// receivers can switch at their pace.
		e.Secrets = []string{secret, e.Secrets[0]}
		return nil
	})
	if err != nil {
		return err
	}
	v := view(e, false)
	v.Secret = shownOnce(secret)
	return printEndpoint(g, v)
}

// EndpointsDeleteCmd deletes an endpoint.
type EndpointsDeleteCmd struct {
	ID string `arg:"" help:"Endpoint id."`
}

// Run implements `hookctl endpoints delete`.
func (c *EndpointsDeleteCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.DeleteEndpoint(ctx, c.ID); err != nil {
		return endpointError(err)
	}
	if g.JSON() {
		return g.PrintJSON(map[string]any{"id": c.ID, "deleted": true})
	}
	fmt.Fprintf(g.Out(), "deleted endpoint %s\n", c.ID)
	return nil
}
