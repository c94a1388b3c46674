package endpoint

// Input reports (`input` events, protocol section 5) are made by whoever
// moved an input's cursor: the input's copying goroutine, or the reader
// of the connection that brought the bytes. Neither may wait for another
// connection's writer, which waits as long as its client does not read:
// a report is left for the writer instead, the newest per stream
// replacing an older one still waiting (the newest cursors say all the
// older ones said), and the writer sends it when it comes to it.

// reportInput leaves a report of stream id's input cursors for the
// writer, without waiting.
func (ss *Session) reportInput(id, received, written uint64) {
	ss.mu.Lock()
	if ss.reports == nil {
		ss.reports = map[uint64][2]uint64{}
	}
	if old, ok := ss.reports[id]; ok && old[1] >= written {
		ss.mu.Unlock()
		return // reports arrive out of order: the newest counts
	}
	ss.reports[id] = [2]uint64{received, written}
	ss.mu.Unlock()
	select {
	case ss.reportsDue <- struct{}{}:
	default: // the writer was told already
	}
}

// writeReports writes the reports waiting, on the writer; false if the
// connection failed.
func (ss *Session) writeReports() bool {
	ss.mu.Lock()
	reports := ss.reports
	ss.reports = nil
	ss.mu.Unlock()
	for id, c := range reports {
		b, _ := jsonBytes(map[string]any{"event": "input", "stream": id, "received": c[0], "written": c[1]})
		ss.out.writing.Lock()
		ok := ss.write(outFrame{msg: b})
		ss.out.writing.Unlock()
		if !ok {
			return false
		}
	}
	return true
}
