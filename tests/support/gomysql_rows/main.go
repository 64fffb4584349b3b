// Command gomysql-rows decodes binlog files with go-mysql's parser
// (replication.NewBinlogParser().ParseFile / ParseReader, an independent decoder) and prints
// one JSON document: per file, the server version, the event count, every row of every rows
// event (database, table, operation, column names when the table map carries them, column
// types, and each value as text) and the parser's error, if any.
//
// Values are written as the text MySQL's CAST(col AS CHAR) gives where go-mysql's value
// allows it: integers in decimal (unsigned columns as unsigned when the table map says so),
// DECIMAL as go-mysql's string, floats in Go's shortest form, temporal values as go-mysql
// formats them, strings and blobs as {"hex": ...} (the reader's test decides what is text),
// JSON as {"json": its text} (with "opaque": where the document holds opaque values, and their
// MySQL types, which go-mysql's text drops), ENUM/SET as their names where the table map
// carries them, NULL as null; a column the row image leaves out is {"absent": true}. Each
// TRANSACTION_PAYLOAD_EVENT is listed by the types of the events go-mysql expanded it into.
//
// Usage: gomysql-rows FILE... (a .gz file is gunzipped in memory). Run with TZ=UTC.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

type row struct {
	Db      string    `json:"db"`
	Table   string    `json:"table"`
	Op      string    `json:"op"`
	Columns []*string `json:"columns"`
	Types   []int     `json:"types"`
	Before  []any     `json:"before,omitempty"`
	After   []any     `json:"after,omitempty"`
}

type file struct {
	File   string `json:"file"`
	Server string `json:"server"`
	Events int    `json:"events"`
	Rows   []row  `json:"rows"`
	// rows of table maps without column names, counted by "db.table op": only their number
	// is compared (a reader turns them into table-level invalidations)
	Unnamed map[string]int `json:"unnamed"`
	// the event types of each TRANSACTION_PAYLOAD_EVENT's inner events, in order
	Payloads [][]int `json:"payloads"`
	Error    string  `json:"error,omitempty"`
	// each rows event's images with JSON columns read as the BLOBs they are stored as (the
	// binary documents), for opaques
	raw map[*replication.RowsEvent][][]any
}

func main() {
	var out []file
	for _, name := range os.Args[1:] {
		out = append(out, parse(name))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}

func parse(name string) (f file) {
	f = file{File: filepath.Base(name), Rows: []row{}, Unnamed: map[string]int{},
		Payloads: [][]int{}, raw: map[*replication.RowsEvent][][]any{}}
	data, err := os.ReadFile(name)
	if err != nil {
		f.Error = err.Error()
		return
	}
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err == nil {
			data, err = io.ReadAll(zr)
		}
		if err != nil {
			f.Error = err.Error()
			return
		}
	}
	defer func() {
		if r := recover(); r != nil {
			f.Error = fmt.Sprintf("panic: %v", r)
		}
	}()
	p := replication.NewBinlogParser()
	p.SetVerifyChecksum(true)
	p.SetRowsEventDecodeFunc(f.decodeRows)
	if len(data) < 4 || !bytes.Equal(data[:4], replication.BinLogFileHeader) {
		f.Error = "not a binlog file"
		return
	}
	data = withoutInUseFlag(data)
	err = p.ParseReader(bytes.NewReader(data[4:]), func(e *replication.BinlogEvent) error {
		f.Events++
		switch ev := e.Event.(type) {
		case *replication.FormatDescriptionEvent:
			f.Server = strings.TrimRight(string(ev.ServerVersion), "\x00")
		case *replication.RowsEvent:
			f.add(e.Header.EventType, ev)
		case *replication.TransactionPayloadEvent:
			types := []int{}
			for _, inner := range ev.Events {
				types = append(types, int(inner.Header.EventType))
				if r, ok := inner.Event.(*replication.RowsEvent); ok {
					f.add(inner.Header.EventType, r)
				}
			}
			f.Payloads = append(f.Payloads, types)
		}
		return nil
	})
	if err != nil {
		f.Error = err.Error()
	}
	return
}

// withoutInUseFlag: the file with LOG_EVENT_BINLOG_IN_USE_F (0x1) cleared in the format
// description's flags. A server sets it while the file is open and computes the event's
// checksum without it (MySQL's Log_event_footer::event_checksum_test clears it before
// verifying); go-mysql verifies the bytes as they are, so a file copied while in use would
// fail its first checksum.
func withoutInUseFlag(data []byte) []byte {
	out := append([]byte(nil), data...)
	const flags = 4 + 17 // magic, then the header's flags field
	if len(out) > flags && out[4+4] == byte(replication.FORMAT_DESCRIPTION_EVENT) {
		out[flags] &^= 1
	}
	return out
}

// decodeRows decodes a rows event as go-mysql does, after decoding it once more with its JSON
// columns typed as BLOBs of the same length size (the metadata of both), which gives each
// JSON value's binary document. Not for partial JSON updates (their partial bits count the
// JSON columns) nor the inner events of a transaction payload (go-mysql expands those with a
// parser of its own): their documents are not kept.
func (f *file) decodeRows(ev *replication.RowsEvent, data []byte) error {
	pos, err := ev.DecodeHeader(data)
	if err != nil {
		return err
	}
	if blobs := jsonAsBlobs(ev.Table); blobs != nil && ev.Type() != replication.EnumRowsEventTypeUnknown {
		table := ev.Table
		ev.Table = blobs
		err = ev.DecodeData(pos, data)
		ev.Table = table
		if err != nil {
			return err
		}
		f.raw[ev] = ev.Rows
	}
	return ev.DecodeData(pos, data)
}

// jsonAsBlobs: a copy of the table map with its JSON columns typed BLOB, or nil without any
func jsonAsBlobs(tm *replication.TableMapEvent) *replication.TableMapEvent {
	types := append([]byte(nil), tm.ColumnType...)
	found := false
	for i, t := range types {
		if isJSON(t) {
			types[i], found = mysql.MYSQL_TYPE_BLOB, true
		}
	}
	if !found {
		return nil
	}
	out := *tm
	out.ColumnType = types
	return &out
}

func (f *file) add(t replication.EventType, ev *replication.RowsEvent) {
	raw := f.raw[ev]
	delete(f.raw, ev)
	if len(ev.Table.ColumnName) == 0 {
		step := 1
		if op(t) == "update" {
			step = 2
		}
		f.Unnamed[fmt.Sprintf("%s.%s %s", ev.Table.Schema, ev.Table.Table, op(t))] += len(ev.Rows) / step
		return
	}
	f.Rows = append(f.Rows, rows(t, ev, raw)...)
}

func op(t replication.EventType) string {
	switch t {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return "insert"
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2,
		replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		return "delete"
	}
	return "update"
}

func rows(t replication.EventType, ev *replication.RowsEvent, raw [][]any) []row {
	tm := ev.Table
	var names []*string
	if len(tm.ColumnName) > 0 {
		for _, n := range tm.ColumnName {
			s := string(n)
			names = append(names, &s)
		}
	}
	types := make([]int, len(tm.ColumnType))
	for i, c := range tm.ColumnType {
		types[i] = int(c)
	}
	unsigned := tm.UnsignedMap()
	names2 := labels(tm)
	kind := op(t)
	var out []row
	step := 1
	if kind == "update" {
		step = 2
	}
	for i := 0; i+step <= len(ev.Rows); i += step {
		r := row{Db: string(tm.Schema), Table: string(tm.Table), Op: kind, Columns: names, Types: types}
		first := values(ev.Rows[i], nth(raw, i), ev.SkippedColumns, i, tm.ColumnType, unsigned, names2)
		switch kind {
		case "insert":
			r.After = first
		case "delete":
			r.Before = first
		default:
			r.Before = first
			r.After = values(ev.Rows[i+1], nth(raw, i+1), ev.SkippedColumns, i+1, tm.ColumnType, unsigned, names2)
		}
		out = append(out, r)
	}
	return out
}

// labels: column -> (ENUM or SET, its value names) from the table map's optional metadata,
// so that an ENUM index or a SET bitmask is written as MySQL shows it
func labels(tm *replication.TableMapEvent) map[int]struct {
	set   bool
	names []string
} {
	out := map[int]struct {
		set   bool
		names []string
	}{}
	enums, sets := tm.EnumStrValueString(), tm.SetStrValueString()
	e, st := 0, 0
	for i := range tm.ColumnType {
		if tm.IsEnumColumn(i) && e < len(enums) {
			out[i] = struct {
				set   bool
				names []string
			}{false, enums[e]}
			e++
		} else if tm.IsSetColumn(i) && st < len(sets) {
			out[i] = struct {
				set   bool
				names []string
			}{true, sets[st]}
			st++
		}
	}
	return out
}

func nth(images [][]any, i int) []any {
	if i < len(images) {
		return images[i]
	}
	return nil
}

func values(image, raw []any, skipped [][]int, at int, types []byte, unsigned map[int]bool,
	named map[int]struct {
		set   bool
		names []string
	}) []any {
	absent := map[int]bool{}
	if at < len(skipped) {
		for _, c := range skipped[at] {
			absent[c] = true
		}
	}
	out := make([]any, len(image))
	for i, v := range image {
		if absent[i] {
			out[i] = map[string]bool{"absent": true}
			continue
		}
		if l, ok := named[i]; ok {
			if n, isInt := v.(int64); isInt {
				out[i] = label(n, l.set, l.names)
				continue
			}
		}
		js := i < len(types) && isJSON(types[i])
		out[i] = text(v, js, unsigned[i])
		if doc, ok := out[i].(map[string]any); ok && js && i < len(raw) {
			if b, isBytes := raw[i].([]byte); isBytes {
				if found := opaques(b); len(found) > 0 {
					doc["opaque"] = found
				}
			}
		}
	}
	return out
}

func label(n int64, set bool, names []string) string {
	if !set {
		if n >= 1 && int(n) <= len(names) {
			return names[n-1]
		}
		return ""
	}
	var parts []string
	for b, name := range names {
		if n&(1<<uint(b)) != 0 {
			parts = append(parts, name)
		}
	}
	return strings.Join(parts, ",")
}

func isJSON(t byte) bool { return t == 245 }

func text(v any, js bool, unsigned bool) any {
	switch x := v.(type) {
	case nil:
		return nil
	case int8:
		if unsigned {
			return strconv.FormatUint(uint64(uint8(x)), 10)
		}
		return strconv.FormatInt(int64(x), 10)
	case int16:
		if unsigned {
			return strconv.FormatUint(uint64(uint16(x)), 10)
		}
		return strconv.FormatInt(int64(x), 10)
	case int32:
		if unsigned {
			return strconv.FormatUint(uint64(uint32(x)), 10)
		}
		return strconv.FormatInt(int64(x), 10)
	case int64:
		if unsigned {
			return strconv.FormatUint(uint64(x), 10)
		}
		return strconv.FormatInt(x, 10)
	case uint8, uint16, uint32, uint64, int:
		return fmt.Sprint(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		if js {
			return map[string]any{"json": x}
		}
		return map[string]string{"hex": hex.EncodeToString([]byte(x))}
	case []byte:
		if js {
			return map[string]any{"json": string(x)}
		}
		return map[string]string{"hex": hex.EncodeToString(x)}
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05.999999")
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprintf("%T:%v", v, v)
}

// opaque is one opaque value of a binary JSON document (a MySQL field type and its bytes):
// where it lies and its type, which MySQL's text of the document depends on and go-mysql's
// text drops.
type opaque struct {
	Path []any `json:"path"` // object keys and array indexes from the document's root
	Type int   `json:"type"` // the MySQL field type (MYSQL_TYPE_*)
}

// Binary JSON (MySQL's sql-common/json_binary.h): a type byte, then the value. An object or
// an array is an element count and a byte size (2-byte fields when small, 4-byte when large),
// an object's key entries (offset, 2-byte length), then a value entry per element: a type
// byte and the value's offset from the container's start, or the value itself when it fits.
const (
	jsonSmallObject = 0x00
	jsonLargeObject = 0x01
	jsonSmallArray  = 0x02
	jsonLargeArray  = 0x03
	jsonLiteral     = 0x04
	jsonInt16       = 0x05
	jsonUint16      = 0x06
	jsonInt32       = 0x07
	jsonUint32      = 0x08
	jsonOpaque      = 0x0f
)

// opaques: every opaque value of the binary document doc, in document order
func opaques(doc []byte) []opaque {
	var out []opaque
	if len(doc) > 0 {
		walk(doc[0], doc[1:], nil, &out)
	}
	return out
}

func walk(tp byte, data []byte, path []any, out *[]opaque) {
	if tp == jsonOpaque {
		*out = append(*out, opaque{Path: append([]any{}, path...), Type: int(data[0])})
		return
	}
	if tp > jsonLargeArray {
		return
	}
	small := tp == jsonSmallObject || tp == jsonSmallArray
	object := tp == jsonSmallObject || tp == jsonLargeObject
	size := 4
	if small {
		size = 2
	}
	count := int(uintN(data, size))
	keys := 0
	if object {
		keys = count
	}
	valueEntries := 2*size + keys*(size+2)
	for i := 0; i < count; i++ {
		var key any = i
		if object {
			entry := 2*size + i*(size+2)
			at := int(uintN(data[entry:], size))
			key = string(data[at : at+int(uintN(data[entry+size:], 2))])
		}
		entry := valueEntries + i*(1+size)
		t := data[entry]
		if t == jsonLiteral || t == jsonInt16 || t == jsonUint16 ||
			(!small && (t == jsonInt32 || t == jsonUint32)) {
			continue // inlined in its entry: a scalar
		}
		walk(t, data[uintN(data[entry+1:], size):], append(path[:len(path):len(path)], key), out)
	}
}

func uintN(data []byte, size int) uint32 {
	if size == 2 {
		return uint32(binary.LittleEndian.Uint16(data))
	}
	return binary.LittleEndian.Uint32(data)
}
