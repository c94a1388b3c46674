package resume

import (
	"cmp"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Clock jump detection. After a restore, the guest's CLOCK_MONOTONIC,
// CLOCK_BOOTTIME and CLOCK_REALTIME carry on from the snapshot as if no
// time passed, while a hardware RTC that follows the host (QEMU's CMOS
// RTC) does not: the RTC minus REALTIME offset jumps by the downtime. A
// system suspend shows as BOOTTIME moving away from MONOTONIC. Comparing
// offsets, not tick gaps, keeps a loaded machine (a late ticker) from
// firing it, and the threshold is well above the RTC's 1 s resolution.
const (
	clockTick      = time.Second
	clockThreshold = 3 * time.Second
	rtcPath        = "/sys/class/rtc/rtc0/since_epoch"
)

// Clocks reads the clocks the detector compares; tests substitute it.
type Clocks interface {
	// Read returns RTC minus REALTIME and BOOTTIME minus MONOTONIC; ok is
	// false for an offset that cannot be read (no RTC).
	Read() (rtcOffset time.Duration, rtcOK bool, bootOffset time.Duration)
}

// ClockJumpDetector calls report when the offsets jump.
type ClockJumpDetector struct {
	clocks Clocks
	report func()
	log    *zap.Logger

	mu             sync.Mutex
	rtcBase        time.Duration
	rtcOK          bool
	bootBase       time.Duration
	stop, finished chan struct{}
}

// WatchClocks starts the detector; clocks nil reads the real ones. Each
// jump is logged with the offsets before and after it, so that a resume
// the agent detected can be explained.
func WatchClocks(clocks Clocks, log *zap.Logger, report func()) *ClockJumpDetector {
	return watchClocks(clocks, log, clockTick, report)
}

func watchClocks(clocks Clocks, log *zap.Logger, every time.Duration, report func()) *ClockJumpDetector {
	if clocks == nil {
		clocks = systemClocks{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	d := &ClockJumpDetector{clocks: clocks, report: report, log: log, stop: make(chan struct{}), finished: make(chan struct{})}
	d.rebaselineLocked()
	go d.loop(every)
	return d
}

func (d *ClockJumpDetector) rebaselineLocked() {
	d.rtcBase, d.rtcOK, d.bootBase = d.clocks.Read()
}

// SetClock sets the wall clock and takes new baselines in one step, so the
// agent's own clock change is never seen as a jump.
func (d *ClockJumpDetector) SetClock(set func(time.Time) error, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := set(t)
	d.rebaselineLocked()
	return err
}

// Rebaseline takes new baselines: a jump not yet seen is forgotten (the
// resume it belongs to is handled already).
func (d *ClockJumpDetector) Rebaseline() {
	d.mu.Lock()
	d.rebaselineLocked()
	d.mu.Unlock()
}

// Check compares the clocks once; it reports whether a jump was seen.
func (d *ClockJumpDetector) Check() bool {
	d.mu.Lock()
	rtc, rtcOK, boot := d.clocks.Read()
	jumped := (rtcOK && d.rtcOK && abs(rtc-d.rtcBase) >= clockThreshold) || boot-d.bootBase >= clockThreshold
	if jumped {
		d.log.Info("clock jump", zap.Duration("rtc_offset_was", d.rtcBase), zap.Duration("rtc_offset", rtc),
			zap.Bool("rtc", rtcOK && d.rtcOK), zap.Duration("boot_offset_was", d.bootBase), zap.Duration("boot_offset", boot))
	}
	if jumped || rtcOK != d.rtcOK {
		d.rtcBase, d.rtcOK, d.bootBase = rtc, rtcOK, boot
	}
	d.mu.Unlock()
	if jumped {
		d.report()
	}
	return jumped
}

func (d *ClockJumpDetector) loop(every time.Duration) {
	defer close(d.finished)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.Check()
		}
	}
}

// Close stops the detector.
func (d *ClockJumpDetector) Close() {
	close(d.stop)
	<-d.finished
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// systemClocks reads the real clocks. Each offset comes from two clocks
// read one after the other: a thread descheduled between the two reads (a
// loaded machine) would see the delay as a jump, so each pair is read
// again when too much time passed within it.
type systemClocks struct {
	rtc   string         // the RTC's since_epoch file; "" is rtcPath
	pause func(pair int) // tests: runs inside pair 0 (boot) and 1 (RTC)
}

const (
	// clockPairGap is how far apart two reads of one offset may be; the
	// RTC read goes through the CMOS and can take some milliseconds.
	clockPairGap = 250 * time.Millisecond
	// clockPairTries bounds the re-reads; the best pair is used after.
	clockPairTries = 5
)

func (c systemClocks) Read() (time.Duration, bool, time.Duration) {
	rtc, ok := c.rtcOffset()
	return rtc, ok, c.bootOffset()
}

func (c systemClocks) between(pair int) {
	if c.pause != nil {
		c.pause(pair)
	}
}

// bootOffset returns BOOTTIME minus MONOTONIC, from the pair of reads
// closest together.
func (c systemClocks) bootOffset() time.Duration {
	var best, bestGap time.Duration
	for i := range clockPairTries {
		m1 := clockNow(unix.CLOCK_MONOTONIC)
		c.between(0)
		boot := clockNow(unix.CLOCK_BOOTTIME)
		m2 := clockNow(unix.CLOCK_MONOTONIC)
		if gap := m2 - m1; i == 0 || gap < bestGap {
			best, bestGap = boot-m1, gap
		}
		if bestGap < clockPairGap {
			break
		}
	}
	return best
}

// rtcOffset returns the RTC minus CLOCK_REALTIME, from the pair of reads
// closest together; false without a readable RTC.
func (c systemClocks) rtcOffset() (time.Duration, bool) {
	var best, bestGap time.Duration
	for i := range clockPairTries {
		before := time.Now()
		b, err := os.ReadFile(cmp.Or(c.rtc, rtcPath))
		c.between(1)
		now := time.Now()
		if err != nil {
			return 0, false
		}
		sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, false
		}
		if gap := now.Sub(before); i == 0 || gap < bestGap {
			best, bestGap = time.Unix(sec, 0).Sub(now), gap
		}
		if bestGap < clockPairGap {
			break
		}
	}
	return best, true
}

func clockNow(id int32) time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(id, &ts)
	return time.Duration(ts.Nano())
}
