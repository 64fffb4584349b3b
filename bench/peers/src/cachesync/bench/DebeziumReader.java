package cachesync.bench;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;

import org.apache.kafka.connect.storage.MemoryOffsetBackingStore;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

/**
 * Reads one binlog range of one MariaDB table with Debezium's embedded engine (MariaDB
 * connector, JSON records) and prints one JSON line: rows, seconds, rows/s.
 *
 * Arguments are key=value: host, port, user, password_file, database, table, gtid (the
 * server's @@gtid_binlog_pos just before the range), file, pos (its binlog coordinates),
 * rows (stop after this many row changes), server_id, timeout_s. The clock runs from the
 * first row change of the range to the last: JVM start, connection setup and Debezium's
 * schema recovery are excluded (reported apart as setup_s).
 */
public final class DebeziumReader {

    /** The engine's offset store: in memory, holding the start of the range before it starts. */
    public static final class PresetOffsetStore extends MemoryOffsetBackingStore {
        static volatile byte[] presetKey;
        static volatile byte[] presetValue;

        @Override
        public synchronized void start() {
            super.start();
            // MariaDB needs the GTID here: with file:pos alone the connector NPEs on gtidSet
            data.put(ByteBuffer.wrap(presetKey), ByteBuffer.wrap(presetValue));
        }

        @Override
        public java.util.Set<Map<String, Object>> connectorPartitions(String connectorName) {
            return java.util.Set.of();   // only asked for by Connect's REST API, not by the engine
        }
    }

    private static final String NAME = "cachesync-bench";

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = Args.parse(argv);
        long rows = Long.parseLong(args.get("rows"));
        String password = Files.readString(Path.of(args.get("password_file"))).strip();
        String database = args.get("database");
        String table = database + "." + args.get("table");

        PresetOffsetStore.presetKey = ("[\"" + NAME + "\",{\"server\":\"" + NAME + "\"}]")
                .getBytes(StandardCharsets.UTF_8);
        PresetOffsetStore.presetValue = ("{\"file\":\"" + args.get("file") + "\",\"pos\":" + args.get("pos")
                + ",\"gtids\":\"" + args.get("gtid") + "\"}").getBytes(StandardCharsets.UTF_8);

        Properties props = new Properties();
        props.setProperty("name", NAME);
        props.setProperty("topic.prefix", NAME);
        props.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        props.setProperty("database.hostname", args.get("host"));
        props.setProperty("database.port", args.get("port"));
        props.setProperty("database.user", args.get("user"));
        props.setProperty("database.password", password);
        props.setProperty("database.server.id", args.get("server_id"));
        props.setProperty("database.include.list", database);
        props.setProperty("table.include.list", table);
        // the offset says where to stream from; "recovery" rebuilds the in-memory schema
        // history from the current table definitions (no data snapshot) before streaming
        props.setProperty("snapshot.mode", "recovery");
        props.setProperty("schema.history.internal", "io.debezium.relational.history.MemorySchemaHistory");
        props.setProperty("offset.storage", PresetOffsetStore.class.getName());
        props.setProperty("offset.flush.interval.ms", "600000");
        props.setProperty("include.schema.changes", "false");
        props.setProperty("tombstones.on.delete", "false");

        Counter counter = new Counter(new RowCount(rows), table);   // setup_s includes the engine's start
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(props)
                .notifying(counter::handle)
                .using((success, message, error) -> counter.engineStopped(success, message, error))
                .build();
        Executors.newSingleThreadExecutor(runnable -> {
            Thread thread = new Thread(runnable, "debezium-engine");
            thread.setDaemon(true);
            return thread;
        }).execute(engine);
        Args.watchdog(Long.parseLong(args.getOrDefault("timeout_s", "600")), () -> counter.count.seen, rows);
        counter.done.await();
        if (counter.failure != null) {
            Args.fail(counter.failure);
        }
        // no engine.close(): the process exits now, and closing a stopping engine throws
        counter.count.printAndExit("debezium");
    }

    /** Feeds the engine's records of the range's table to a RowCount until it has them all. */
    static final class Counter {
        final RowCount count;
        final String topic;
        final CountDownLatch done = new CountDownLatch(1);
        volatile String failure;

        Counter(RowCount count, String table) {
            this.count = count;
            this.topic = NAME + "." + table;
        }

        void handle(List<ChangeEvent<String, String>> records,
                    DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
                throws InterruptedException {
            for (ChangeEvent<String, String> record : records) {
                if (count.seen >= count.rows || record.value() == null
                        || !topic.equals(record.destination())) {
                    continue;
                }
                if (count.add(operation(record.value()), 1)) {
                    done.countDown();
                }
            }
            committer.markBatchFinished();
        }

        private static int operation(String value) {
            // the envelope's "op" field, searched from the end where the converter puts it
            int at = value.lastIndexOf("\"op\":\"");
            char op = at < 0 ? '?' : value.charAt(at + 6);
            return op == 'c' ? RowCount.INSERT : op == 'u' ? RowCount.UPDATE : op == 'd' ? RowCount.DELETE : -1;
        }

        void engineStopped(boolean success, String message, Throwable error) {
            if (count.seen < count.rows) {
                failure = "engine stopped after " + count.seen + " rows: " + message
                        + (error == null ? "" : " (" + error + ")");
                done.countDown();
            }
        }
    }
}
