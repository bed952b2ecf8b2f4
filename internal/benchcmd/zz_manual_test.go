package benchcmd

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

func TestManualRun(t *testing.T) {
	if os.Getenv("MANUAL") == "" {
		t.Skip()
	}
	for i := 0; i < 4; i++ {
		cfg := Config{DB: os.Getenv("DB"), Broker: os.Getenv("BROKER"), Rows: 3000, Tests: []string{"drain"}, SkipBaseline: true,
			Rate: 50, Duration: 2 * time.Second, BaselineTime: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
		if _, err := Run(t.Context(), cfg, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
}
