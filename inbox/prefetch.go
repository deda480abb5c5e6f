package inbox

import "github.com/sagaflow/sagaflow/internal/txhooks"

func init() {
	txhooks.SetPrefetch = func(cfg any, p txhooks.Prefetch) { cfg.(*Config).prefetch = p }
}
