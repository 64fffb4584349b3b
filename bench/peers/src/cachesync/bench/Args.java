package cachesync.bench;

import java.util.HashMap;
import java.util.Map;

/** key=value command-line arguments, and the one-line JSON error every reader exits with. */
final class Args {
    private Args() {
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (String arg : argv) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                fail("argument " + arg + " is not key=value");
            }
            args.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        return args;
    }

    /** Fails the reader after timeoutSeconds: a range with fewer rows than asked never ends. */
    static void watchdog(long timeoutSeconds, java.util.function.LongSupplier seen, long rows) {
        Thread thread = new Thread(() -> {
            try {
                Thread.sleep(timeoutSeconds * 1000);
            } catch (InterruptedException e) {
                return;
            }
            fail("timed out after " + seen.getAsLong() + " of " + rows + " rows");
        }, "watchdog");
        thread.setDaemon(true);
        thread.start();
    }

    static void fail(String message) {
        System.out.println("{\"error\":\"" + message.replace("\\", "\\\\").replace("\"", "\\\"")
                .replace("\n", " ") + "\"}");
        System.out.flush();
        System.exit(1);
    }
}
