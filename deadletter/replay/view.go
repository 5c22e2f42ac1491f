package replay

import (
	"encoding/json"

	"github.com/hookd/hookd/store"
)

// accountProgress is the progress column as an account token sees it.
type accountProgress struct {
	Scanned int64            `json:"scanned"`
	Skips   map[string]int64 `json:"skips,omitempty"`
}

// AccountView is row as an account sees it: its progress keeps the counts
// of the account's own dead letters (scanned, skips by reason) and leaves
// out the DLQ partitions and offsets (ranges, next, markers), which span
// every account's dead letters and would tell one account how many the
// others have.
func AccountView(row store.Replay) store.Replay {
	var p progress
	if len(row.Progress) > 0 && json.Unmarshal(row.Progress, &p) != nil {
		p = progress{}
	}
	row.Progress, _ = json.Marshal(accountProgress{Scanned: p.Scanned, Skips: p.Skips})
	return row
}
