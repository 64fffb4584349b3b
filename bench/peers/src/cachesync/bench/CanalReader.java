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

        RowCount count = new RowCount(rows);   // its clock starts here: setup_s includes connecting
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

        Args.watchdog(Long.parseLong(args.getOrDefault("timeout_s", "600")), () -> count.seen, rows);
        try {
            dump.dump(args.get("file"), Long.parseLong(args.get("pos")), new SinkFunction<LogEvent>() {
                @Override
                public boolean sink(LogEvent event) {
                    return !count(count, convert, event);
                }
            });
        } catch (Exception e) {
            if (count.seen < rows) {
                Args.fail("canal stopped after " + count.seen + " rows: " + e);
            }
        }
        if (count.seen < rows) {
            Args.fail("the binlog dump ended after " + count.seen + " of " + rows + " rows");
        }
        count.printAndExit("canal");
    }

    /** Counts the row changes of one binlog event; true once the range's rows were all seen. */
    private static boolean count(RowCount count, LogEventConvert convert, LogEvent event) {
        CanalEntry.Entry entry = convert.parse(event, false);
        if (entry == null || entry.getEntryType() != CanalEntry.EntryType.ROWDATA) {
            return false;
        }
        CanalEntry.RowChange change;
        try {
            change = CanalEntry.RowChange.parseFrom(entry.getStoreValue());
        } catch (Exception e) {
            throw new IllegalStateException("undecodable row change: " + e, e);
        }
        int op = switch (change.getEventType()) {
            case INSERT -> RowCount.INSERT;
            case UPDATE -> RowCount.UPDATE;
            case DELETE -> RowCount.DELETE;
            default -> -1;
        };
        return count.add(op, change.getRowDatasCount());
    }
}
