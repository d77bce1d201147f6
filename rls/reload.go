package rls

import (
	"bytes"
	"crypto/sha256"
	"sync"
	"time"
)

// DefaultReloadEvery is how often a Watcher reads its files by default.
const DefaultReloadEvery = 250 * time.Millisecond

// Watcher reloads a Service's configuration from a file or a directory of
// them whenever their contents change, as envoyproxy/ratelimit does for
// RUNTIME_ROOT. It reads them every interval (polling works the same on
// every file system, through ConfigMap symlink swaps included); a change
// takes effect within one interval, without resetting any counter
// (Service.SetConfig). A configuration that fails to load or to bind keeps
// the one in force; the failure is logged and LastError returns it until a
// good one loads. It is safe for concurrent use.
type Watcher struct {
	svc   *Service
	path  string
	every time.Duration

	mu      sync.Mutex
	lastErr error
	sum     [32]byte

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Watch loads path into svc now, and then whenever it changes, every
// interval (DefaultReloadEvery when interval is 0 or less). It returns the
// error of the first load, and a Watcher that goes on watching either way
// (so that a service started on a bad file picks up a fixed one); Close
// stops it.
func Watch(svc *Service, path string, interval time.Duration) (*Watcher, error) {
	if interval <= 0 {
		interval = DefaultReloadEvery
	}
	w := &Watcher{svc: svc, path: path, every: interval, stop: make(chan struct{}), done: make(chan struct{})}
	err := w.Reload()
	go w.run()
	return w, err
}

func (w *Watcher) run() {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			_ = w.Reload()
		}
	}
}

// Reload reads the files now and puts them in force if their contents
// changed since the last load that succeeded. It returns the error of the
// load, nil when nothing changed.
func (w *Watcher) Reload() error {
	files, err := readFiles(w.path)
	if err == nil {
		h := sha256.New()
		for _, f := range files {
			h.Write([]byte(f.Name))
			h.Write([]byte{0})
			h.Write(f.Data)
			h.Write([]byte{0})
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		w.mu.Lock()
		same := bytes.Equal(sum[:], w.sum[:]) && w.lastErr == nil && w.svc.Config() != nil
		w.mu.Unlock()
		if same {
			return nil
		}
		var cfg *Config
		if cfg, err = ParseConfig(files...); err == nil {
			err = w.svc.SetConfig(cfg)
		}
		if err == nil {
			w.mu.Lock()
			w.sum, w.lastErr = sum, nil
			w.mu.Unlock()
			return nil
		}
	}
	w.mu.Lock()
	changed := w.lastErr == nil || w.lastErr.Error() != err.Error()
	w.lastErr = err
	w.mu.Unlock()
	w.svc.stats.configLoadError.Add(1)
	if changed {
		w.svc.opts.Logger.Error("rls: configuration not loaded; the previous one stays in force", "path", w.path, "err", err)
	}
	return err
}

// LastError returns why the newest configuration was not loaded, nil when
// the files in force are the newest.
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Close stops the watcher; it is safe to call twice.
func (w *Watcher) Close() error {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return nil
}
