package cachesync.bench;

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import com.alibaba.otter.canal.filter.aviater.AviaterRegexFilter;
import com.alibaba.otter.canal.parse.inbound.SinkFunction;
import com.alibaba.otter.canal.parse.inbound.mysql.MysqlConnection;
import com.alibaba.otter.canal.parse.inbound.mysql.dbsync.LogEventConvert;
import com.alibaba.otter.canal.parse.inbound.mysql.dbsync.TableMetaCache;
import com.alibaba.otter.canal.protocol.CanalEntry;
import com.taobao.tddl.dbsync.binlog.LogEvent;

/**
 * Reads one binlog range of one MariaDB table with Alibaba Canal's parser (canal.parse
 * 1.1.7: MysqlConnection.dump from the range's binlog file:pos, each event through
 * LogEventConvert into a CanalEntry, each row change decoded back from its RowChange, as a
 * Canal client does) and prints one JSON line: rows, seconds, rows/s.
 *
 * Arguments are key=value: host, port, user, password_file, database, table, file, pos,
 * rows (stop after this many row changes), server_id, timeout_s. The clock runs from the first row
 * change of the range to the last: JVM start and connection setup are excluded (setup_s).
 */
public final class CanalReader {

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = Args.parse(argv);
        long rows = Long.parseLong(args.get("rows"));
        String password = Files.readString(Path.of(args.get("password_file"))).strip();
        InetSocketAddress address = new InetSocketAddress(args.get("host"), Integer.parseInt(args.get("port")));
        String table = args.get("database") + "." + args.get("table");

        long t0 = System.nanoTime();
        MysqlConnection dump = new MysqlConnection(address, args.get("user"), password);
        dump.setSlaveId(Long.parseLong(args.get("server_id")));
        dump.connect();
        MysqlConnection meta = dump.fork();   // the table definitions are read on their own connection
        meta.connect();

        LogEventConvert convert = new LogEventConvert();
        convert.setCharset(StandardCharsets.UTF_8);
        convert.setNameFilter(new AviaterRegexFilter(table.replace(".", "\\.")));
        convert.setTableMetaCache(new TableMetaCache(meta, null));
        convert.setFilterQueryDml(true);
        convert.start();

        Counter counter = new Counter(rows);
        Args.watchdog(Long.parseLong(args.getOrDefault("timeout_s", "600")), () -> counter.seen, rows);
        try {
            dump.dump(args.get("file"), Long.parseLong(args.get("pos")), new SinkFunction<LogEvent>() {
                @Override
                public boolean sink(LogEvent event) {
                    return counter.sink(convert, event);
                }
            });
        } catch (Exception e) {
            if (counter.seen < rows) {
                Args.fail("canal stopped after " + counter.seen + " rows: " + e);
            }
        }
        if (counter.seen < rows) {
            Args.fail("the binlog dump ended after " + counter.seen + " of " + rows + " rows");
        }
        System.out.println(counter.json((counter.firstNanos - t0) / 1e9));
        System.out.flush();
        System.exit(0);
    }

    /** Counts the range's row changes by operation; the clock is first row to last. */
    static final class Counter {
        final long rows;
        volatile long seen;
        long firstNanos;
        long lastNanos;
        final long[] ops = new long[3];   // insert, update, delete

        Counter(long rows) {
            this.rows = rows;
        }

        /** One binlog event; false (stop the dump) once the range's rows were all seen. */
        boolean sink(LogEventConvert convert, LogEvent event) {
            CanalEntry.Entry entry = convert.parse(event, false);
            if (entry == null || entry.getEntryType() != CanalEntry.EntryType.ROWDATA) {
                return true;
            }
            CanalEntry.RowChange change;
            try {
                change = CanalEntry.RowChange.parseFrom(entry.getStoreValue());
            } catch (Exception e) {
                throw new IllegalStateException("undecodable row change: " + e, e);
            }
            if (seen == 0) {
                firstNanos = System.nanoTime();
            }
            int n = change.getRowDatasCount();
            switch (change.getEventType()) {
                case INSERT -> ops[0] += n;
                case UPDATE -> ops[1] += n;
                case DELETE -> ops[2] += n;
                default -> { }
            }
            seen += n;
            if (seen >= rows) {
                lastNanos = System.nanoTime();
                return false;
            }
            return true;
        }

        String json(double setupSeconds) {
            double seconds = (lastNanos - firstNanos) / 1e9;
            return String.format(java.util.Locale.ROOT,
                    "{\"reader\":\"canal\",\"rows\":%d,\"seconds\":%.4f,\"rows_per_s\":%.1f,"
                            + "\"setup_s\":%.4f,\"ops\":{\"insert\":%d,\"update\":%d,\"delete\":%d}}",
                    seen, seconds, seconds > 0 ? seen / seconds : 0.0, setupSeconds, ops[0], ops[1], ops[2]);
        }
    }
}
