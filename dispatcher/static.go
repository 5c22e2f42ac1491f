package dispatcher

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/drain"
)

// leaveStatic leaves the group as the static member InstanceID, after a
// graceful stop (Config.InstanceID has the why). kgo does not leave for a
// static member when its client closes, so that a restart finds its place
// kept; a stop that is not followed by a restart would then hold its
// partitions, committed and idle, for SessionTimeout. The leave goes
// through the intent client, still open, to the group's coordinator. A
// failure is logged: the partitions move after SessionTimeout instead.
func (d *Dispatcher) leaveStatic(ctx context.Context) {
	if d.cfg.InstanceID == "" {
		return
	}
	lctx, cancel := drain.Context(ctx, 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = d.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.InstanceID = &d.cfg.InstanceID
	m.Reason = kmsg.StringPtr("hookd dispatcher stopped")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(lctx, d.intents)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && len(resp.Members) > 0 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	if err != nil {
		d.log.WarnContext(ctx, "leaving the group as a static member failed; its partitions move to the others after the session timeout",
			"instance_id", d.cfg.InstanceID, "session_timeout", d.cfg.SessionTimeout, "error", err)
		return
	}
	d.log.InfoContext(ctx, "left the group", "instance_id", d.cfg.InstanceID)
}
