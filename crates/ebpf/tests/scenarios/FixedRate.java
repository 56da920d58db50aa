// A JVM scheduled task every 10 ms and nothing else: the executor's thread
// ("ticker") waits for the next run in a timed futex wait (parkNanos) that
// times out. Runs for argv[0] seconds, then prints how many runs it made.
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public class FixedRate {
    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 600;
        AtomicLong runs = new AtomicLong();
        ScheduledExecutorService ticker =
                Executors.newSingleThreadScheduledExecutor(r -> new Thread(r, "ticker"));
        ticker.scheduleAtFixedRate(runs::incrementAndGet, 10, 10, TimeUnit.MILLISECONDS);
        Thread.sleep(seconds * 1000);
        System.out.println(runs.get());
        ticker.shutdownNow();
    }
}
