package store

// RenderWindowsAlways makes s write every attempt batch with the
// statements for batches holding several attempts of one delivery.
func RenderWindowsAlways(s *Store) { s.windowsAlways = true }
