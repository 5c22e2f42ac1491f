//go:build !unix

package daemon

import "errors"

// raiseFileLimit has nothing to raise outside Unix: Windows has no
// per-process descriptor limit of this kind.
func raiseFileLimit() (soft, hard uint64, err error) { return 0, 0, errors.ErrUnsupported }
