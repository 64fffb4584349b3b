package cachesync.bench;

import java.lang.management.ManagementFactory;
import java.util.Locale;

/**
 * The rows of one range counted by operation, timed from the first row change to the last,
 * with the process's CPU time over the same span (every thread: the reader's and the JVM's).
 */
final class RowCount {
    static final int INSERT = 0;
    static final int UPDATE = 1;
    static final int DELETE = 2;

    final long rows;
    private final long startNanos = System.nanoTime();
    private final long[] ops = new long[3];
    private long firstNanos;
    private long lastNanos;
    private long firstCpuNanos;
    private long lastCpuNanos;
    volatile long seen;

    RowCount(long rows) {
        this.rows = rows;
    }

    /** Counts n row changes of op (INSERT, UPDATE, DELETE, or -1: another); true once all rows were seen. */
    boolean add(int op, long n) {
        if (seen == 0) {
            firstNanos = System.nanoTime();
            firstCpuNanos = cpuNanos();
        }
        if (op >= 0) {
            ops[op] += n;
        }
        seen += n;
        if (seen >= rows) {
            lastNanos = System.nanoTime();
            lastCpuNanos = cpuNanos();
            return true;
        }
        return false;
    }

    /** Prints the figures as one JSON line and ends the process: setup_s is the time before the first row. */
    void printAndExit(String reader) {
        // seconds to the microsecond: for a short range (2,000 rows in 3 ms) four decimals
        // disagree with rows_per_s by more than 1 %
        double seconds = (lastNanos - firstNanos) / 1e9;
        System.out.println(String.format(Locale.ROOT,
                "{\"reader\":\"%s\",\"rows\":%d,\"seconds\":%.6f,\"rows_per_s\":%.1f,\"setup_s\":%.4f,"
                        + "\"cpu_s\":%.4f,\"ops\":{\"insert\":%d,\"update\":%d,\"delete\":%d}}",
                reader, seen, seconds, seconds > 0 ? seen / seconds : 0.0, (firstNanos - startNanos) / 1e9,
                (lastCpuNanos - firstCpuNanos) / 1e9, ops[INSERT], ops[UPDATE], ops[DELETE]));
        System.out.flush();
        System.exit(0);
    }

    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }
}
