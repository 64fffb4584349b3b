// Command gomysql-reader reads one binlog range of one MariaDB table with go-mysql's
// replication package (github.com/go-mysql-org/go-mysql, BinlogSyncer from the range's
// binlog file:pos, every row decoded into Go values as the library does for its users)
// and prints one JSON line: rows, seconds, rows/s, and the process's CPU seconds over
// the same span.
//
// Arguments are key=value: host, port, user, password_file, database, table, file, pos,
// rows (stop after this many row changes), server_id, timeout_s. The clock runs from the
// first row change of the range to the last: process start and connection setup are
// excluded (setup_s), as in the Java peers (bench/peers/src/cachesync/bench/).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

type counter struct {
	rows, seen         int64
	ops                [3]int64 // insert, update, delete
	start, first, last time.Time
	cpuFirst, cpuLast  time.Duration
}

// add counts n row changes of op (0 insert, 1 update, 2 delete); true once all were seen.
func (c *counter) add(op int, n int64) bool {
	if c.seen == 0 {
		c.first, c.cpuFirst = time.Now(), cpuTime()
	}
	c.ops[op] += n
	c.seen += n
	if c.seen >= c.rows {
		c.last, c.cpuLast = time.Now(), cpuTime()
		return true
	}
	return false
}

func cpuTime() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		fail("getrusage: " + err.Error())
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

func fail(message string) {
	out, _ := json.Marshal(map[string]string{"error": message})
	fmt.Println(string(out))
	os.Exit(1)
}

func parseArgs() map[string]string {
	args := map[string]string{"timeout_s": "600"}
	for _, arg := range os.Args[1:] {
		key, value, ok := strings.Cut(arg, "=")
		if !ok || key == "" {
			fail("argument " + arg + " is not key=value")
		}
		args[key] = value
	}
	return args
}

func number(args map[string]string, key string) uint64 {
	n, err := strconv.ParseUint(args[key], 10, 64)
	if err != nil {
		fail(fmt.Sprintf("%s=%q is not a number", key, args[key]))
	}
	return n
}

// op is the operation of a rows event type, and how many row images make one row change.
func op(t replication.EventType) (int, int64, bool) {
	switch t {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1,
		replication.WRITE_ROWS_EVENTv2, replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return 0, 1, true
	case replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1,
		replication.UPDATE_ROWS_EVENTv2, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		return 1, 2, true // before and after image
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1,
		replication.DELETE_ROWS_EVENTv2, replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		return 2, 1, true
	}
	return 0, 0, false
}

func main() {
	args := parseArgs()
	c := &counter{rows: int64(number(args, "rows")), start: time.Now()}
	password, err := os.ReadFile(args["password_file"])
	if err != nil {
		fail("reading the password file: " + err.Error())
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: uint32(number(args, "server_id")), Flavor: mysql.MariaDBFlavor,
		Host: args["host"], Port: uint16(number(args, "port")), User: args["user"],
		Password: strings.TrimSpace(string(password)), DisableRetrySync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer syncer.Close()
	streamer, err := syncer.StartSync(mysql.Position{Name: args["file"], Pos: uint32(number(args, "pos"))})
	if err != nil {
		fail("starting the binlog dump: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(),
		time.Duration(number(args, "timeout_s"))*time.Second)
	defer cancel()
	database, table := []byte(args["database"]), []byte(args["table"])
	for {
		event, err := streamer.GetEvent(ctx)
		if err != nil {
			fail(fmt.Sprintf("go-mysql stopped after %d of %d rows: %v", c.seen, c.rows, err))
		}
		rows, isRows := event.Event.(*replication.RowsEvent)
		if !isRows || string(rows.Table.Schema) != string(database) || string(rows.Table.Table) != string(table) {
			continue
		}
		kind, images, ok := op(event.Header.EventType)
		if ok && c.add(kind, int64(len(rows.Rows))/images) {
			break
		}
	}
	seconds := c.last.Sub(c.first).Seconds()
	rate := 0.0
	if seconds > 0 {
		rate = float64(c.seen) / seconds
	}
	out, _ := json.Marshal(map[string]any{
		"reader": "gomysql", "rows": c.seen, "seconds": seconds, "rows_per_s": rate,
		"setup_s": c.first.Sub(c.start).Seconds(), "cpu_s": (c.cpuLast - c.cpuFirst).Seconds(),
		"ops": map[string]int64{"insert": c.ops[0], "update": c.ops[1], "delete": c.ops[2]},
	})
	fmt.Println(string(out))
}
