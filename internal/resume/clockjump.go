package resume

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

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

	mu             sync.Mutex
	rtcBase        time.Duration
	rtcOK          bool
	bootBase       time.Duration
	stop, finished chan struct{}
}

// WatchClocks starts the detector; clocks nil reads the real ones.
func WatchClocks(clocks Clocks, report func()) *ClockJumpDetector {
	return watchClocks(clocks, clockTick, report)
}

func watchClocks(clocks Clocks, every time.Duration, report func()) *ClockJumpDetector {
	if clocks == nil {
		clocks = systemClocks{}
	}
	d := &ClockJumpDetector{clocks: clocks, report: report, stop: make(chan struct{}), finished: make(chan struct{})}
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

// Check compares the clocks once; it reports whether a jump was seen.
func (d *ClockJumpDetector) Check() bool {
	d.mu.Lock()
	rtc, rtcOK, boot := d.clocks.Read()
	jumped := (rtcOK && d.rtcOK && abs(rtc-d.rtcBase) >= clockThreshold) || boot-d.bootBase >= clockThreshold
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

type systemClocks struct{}

func (systemClocks) Read() (time.Duration, bool, time.Duration) {
	var mono, boot unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
	bootOff := time.Duration(boot.Nano() - mono.Nano())
	b, err := os.ReadFile(rtcPath)
	now := time.Now()
	if err != nil {
		return 0, false, bootOff
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, bootOff
	}
	return time.Unix(sec, 0).Sub(now), true, bootOff
}
