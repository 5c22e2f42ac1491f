package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// The owner alerts: hookd's operational events, delivered as ordinary
// signed webhooks of the endpoint's account to its endpoints subscribed to
// them by name ("hookd.*"; a plain "*" does not match them), never to the
// endpoint they are about. docs/topics.md shows each one.
const (
	AlertEndpointFailing   = "hookd.endpoint.failing"
	AlertEndpointRecovered = "hookd.endpoint.recovered"
	AlertEndpointDisabled  = "hookd.endpoint.disabled"
	AlertDeadLettered      = "hookd.delivery.dead_lettered"
	// AlertCertExpiring warns, endpoint.ClientCertWarning (14 days)
	// ahead, that an endpoint's client certificate (mutual TLS) expires.
	AlertCertExpiring = "hookd.endpoint.certificate_expiring"
)

// Alert is one owner alert: the event envelope produced to the events topic
// ({"id","account","type","data","created"}), so it takes the normal path
// (router fan-out, signing, retries). Its id is derived from what it is
// about (the episode, the disablement, the hour), so producing it again
// yields the same webhook-id.
type Alert struct {
	ID      string    `json:"id"`
	Account string    `json:"account"`
	Type    string    `json:"type"`
	Data    AlertData `json:"data"`
	Created time.Time `json:"created"`
}

// AlertData is an alert's payload. It names the endpoint (never its URL or
// secrets) and links to its portal page.
type AlertData struct {
	EndpointID  string `json:"endpoint_id"`
	Description string `json:"description,omitempty"`
	// FailingSince starts the failing episode (failing, recovered,
	// disabled when known).
	FailingSince time.Time `json:"failing_since,omitzero"`
	// LastStatus and LastErrorClass describe the newest failed attempt
	// (failing).
	LastStatus     int    `json:"last_status,omitempty"`
	LastErrorClass string `json:"last_error_class,omitempty"`
	// RecoveredAt is the first success after the episode (recovered).
	RecoveredAt time.Time `json:"recovered_at,omitzero"`
	// Reason, Disabled ("automatic" by hookd, "manual" by a person or a
	// tool) and DisabledAt describe a disablement (disabled). Reason is
	// "gone" or "failing" when automatic, the recorded text when manual.
	Reason     string    `json:"reason,omitempty"`
	Disabled   string    `json:"disabled,omitempty"`
	DisabledAt time.Time `json:"disabled_at,omitzero"`
	// Hour, Count and SampleEventIDs describe an hour of dead letters
	// (dead_lettered).
	Hour           time.Time `json:"hour,omitzero"`
	Count          int       `json:"count,omitempty"`
	SampleEventIDs []string  `json:"sample_event_ids,omitempty"`
	// ClientCertExpiresAt is when the endpoint's client certificate
	// expires (certificate_expiring).
	ClientCertExpiresAt time.Time `json:"client_cert_expires_at,omitzero"`
	// PortalURL is the page to look at: the endpoint, or its dead letters.
	PortalURL string `json:"portal_url"`
}

func alertID(typ, endpointID string, key time.Time) string {
	return typ + ":" + endpointID + ":" + strconv.FormatInt(key.UnixNano(), 10)
}

// portalLink is base (the portal's public origin, or "" for a path only)
// and the endpoint's page, or its dead letters with deadLetters.
func portalLink(base, endpointID string, deadLetters bool) string {
	if deadLetters {
		return base + "/portal/deliveries?" + url.Values{"endpoint": {endpointID}, "status": {"dead"}}.Encode()
	}
	return base + "/portal/endpoints/" + url.PathEscape(endpointID)
}

// FailingAlert is the hookd.endpoint.failing event of f's episode.
func FailingAlert(f store.FailingEndpoint, portalBase string, now time.Time) Alert {
	return Alert{ID: alertID(AlertEndpointFailing, f.ID, f.FailingSince), Account: f.Account, Type: AlertEndpointFailing,
		Created: now.UTC(), Data: AlertData{EndpointID: f.ID, Description: f.Description, FailingSince: f.FailingSince.UTC(),
			LastStatus: f.LastStatus, LastErrorClass: f.LastErrorClass, PortalURL: portalLink(portalBase, f.ID, false)}}
}

// RecoveredAlert is the hookd.endpoint.recovered event closing r's episode.
func RecoveredAlert(r store.RecoveredEndpoint, portalBase string, now time.Time) Alert {
	return Alert{ID: alertID(AlertEndpointRecovered, r.ID, r.FailingSince), Account: r.Account, Type: AlertEndpointRecovered,
		Created: now.UTC(), Data: AlertData{EndpointID: r.ID, Description: r.Description, FailingSince: r.FailingSince.UTC(),
			RecoveredAt: r.LastSuccessAt.UTC(), PortalURL: portalLink(portalBase, r.ID, false)}}
}

// DisabledAlert is the hookd.endpoint.disabled event of d.
func DisabledAlert(d store.DisabledEndpoint, portalBase string) Alert {
	how, reason := "manual", d.Detail // "disabled in the portal by ...": the whole text says who
	if d.Reason == store.DisableReasonFailing || d.Reason == store.DisableReasonGone {
		how, reason = "automatic", d.Reason
	}
	return Alert{ID: alertID(AlertEndpointDisabled, d.ID, d.DisabledAt), Account: d.Account, Type: AlertEndpointDisabled,
		Created: d.DisabledAt.UTC(), Data: AlertData{EndpointID: d.ID, Description: d.Description, FailingSince: d.FailingSince.UTC(), Reason: reason,
			Disabled: how, DisabledAt: d.DisabledAt.UTC(), PortalURL: portalLink(portalBase, d.ID, false)}}
}

// DeadLetteredAlert is the hookd.delivery.dead_lettered event of an hour.
func DeadLetteredAlert(a store.DeadLetterAlert, portalBase string) Alert {
	return Alert{ID: alertID(AlertDeadLettered, a.EndpointID, a.Hour), Account: a.Account, Type: AlertDeadLettered,
		Created: a.Hour.Add(time.Hour).UTC(), Data: AlertData{EndpointID: a.EndpointID, Hour: a.Hour.UTC(), Count: a.Count,
			SampleEventIDs: a.SampleEventIDs, PortalURL: portalLink(portalBase, a.EndpointID, true)}}
}

// CertExpiringAlert is the hookd.endpoint.certificate_expiring event of
// c's certificate.
func CertExpiringAlert(c store.ExpiringCert, portalBase string, now time.Time) Alert {
	return Alert{ID: alertID(AlertCertExpiring, c.ID, c.NotAfter), Account: c.Account, Type: AlertCertExpiring,
		Created: now.UTC(), Data: AlertData{EndpointID: c.ID, Description: c.Description,
			ClientCertExpiresAt: c.NotAfter.UTC(), PortalURL: portalLink(portalBase, c.ID, false)}}
}

// opsAlert is an alert as the ops topic carries it: the envelope with the
// endpoint id on top too, like every ops event.
type opsAlert struct {
	Alert
	EndpointID string `json:"endpoint_id"`
}

// Records encodes a for the events topic (keyed by account, as
// applications key their events) and, unless opsTopic is "", the ops topic
// (keyed by endpoint id; the envelope plus a top-level endpoint_id).
func (a Alert) Records(eventsTopic, opsTopic string) ([]*kgo.Record, error) {
	v, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encoding %s alert: %w", a.Type, err)
	}
	recs := []*kgo.Record{{Topic: eventsTopic, Key: []byte(a.Account), Value: v}}
	if opsTopic != "" {
		ov, err := json.Marshal(opsAlert{Alert: a, EndpointID: a.Data.EndpointID})
		if err != nil {
			return nil, fmt.Errorf("encoding %s alert: %w", a.Type, err)
		}
		recs = append(recs, &kgo.Record{Topic: opsTopic, Key: []byte(a.Data.EndpointID), Value: ov})
	}
	return recs, nil
}

// AlertTopics are where alerts go.
type AlertTopics struct {
	// Events is the ingress topic alerts are fanned out from.
	Events string
	// Ops is the operational topic that carries them too.
	Ops string
	// PortalBaseURL prefixes the portal links; "" gives paths only.
	PortalBaseURL string
}

// produceAlert produces al to the events topic and, with toOps, the ops
// topic, acknowledged, then calls done.
func (a *Announcer) produceAlert(ctx context.Context, al Alert, toOps bool, done func() error) error {
	ops := ""
	if toOps {
		ops = a.alerts.Ops
	}
	recs, err := al.Records(a.alerts.Events, ops)
	if err != nil {
		return err
	}
	if err := a.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		a.metrics.events.WithLabelValues(al.Type, "failed").Inc()
		a.logger.ErrorContext(ctx, "producing owner alert failed; will retry", "type", al.Type, "id", al.ID, "error", err)
		return fmt.Errorf("producing %s for %s: %w", al.Type, al.Data.EndpointID, err)
	}
	a.metrics.events.WithLabelValues(al.Type, "produced").Inc()
	a.logger.InfoContext(ctx, "owner alert produced", "type", al.Type, "id", al.ID, "endpoint_id", al.Data.EndpointID,
		"account", al.Account)
	return done()
}

// DefaultWarnAfter is --warn-after's default.
const DefaultWarnAfter = 24 * time.Hour

// alertSweep produces the owed owner alerts: recovered episodes first (so
// a new episode's warning follows its predecessor's end), then failing
// episodes past WarnAfter, client certificates expiring within 14 days,
// then the dead letters of the hours just ended.
func (m *Monitor) alertSweep(ctx context.Context, ann *Announcer) error {
	now, base := m.deps.Clock.Now(), ann.alerts.PortalBaseURL
	var errs []error
	rec, err := m.deps.Store.RecoveredToAnnounce(ctx, m.cfg.FlushLimit)
	errs = append(errs, err)
	for _, r := range rec {
		errs = append(errs, ann.produceAlert(ctx, RecoveredAlert(r, base, now), true, func() error {
			return m.deps.Store.MarkRecoveredAnnounced(ctx, r.ID, r.FailingSince)
		}))
	}
	failing, err := m.deps.Store.FailingToWarn(ctx, now.Add(-m.cfg.WarnAfter), m.cfg.FlushLimit)
	errs = append(errs, err)
	for _, f := range failing {
		errs = append(errs, ann.produceAlert(ctx, FailingAlert(f, base, now), true, func() error {
			return m.deps.Store.MarkFailingWarned(ctx, f.ID, f.FailingSince)
		}))
	}
	certs, err := m.deps.Store.CertsToWarn(ctx, now.Add(endpoint.ClientCertWarning), m.cfg.FlushLimit)
	errs = append(errs, err)
	for _, c := range certs {
		errs = append(errs, ann.produceAlert(ctx, CertExpiringAlert(c, base, now), true, func() error {
			return m.deps.Store.MarkCertWarned(ctx, c.ID, c.NotAfter)
		}))
	}
	if _, err := m.deps.Store.SweepDeadLetterHours(ctx, now.Add(-m.cfg.AlertGrace)); err != nil {
		return errors.Join(append(errs, err)...)
	}
	owed, err := m.deps.Store.OwedDeadLetterAlerts(ctx, m.cfg.FlushLimit)
	errs = append(errs, err)
	for _, o := range owed {
		errs = append(errs, ann.produceAlert(ctx, DeadLetteredAlert(o, base), true, func() error {
			return m.deps.Store.MarkDeadLetterAlertNotified(ctx, o.EndpointID, o.Hour)
		}))
	}
	return errors.Join(errs...)
}
