// A JVM whose threads use native buffers: each of THREADS threads deflates and inflates ROUNDS
// buffers through java.util.zip's Deflater and Inflater, whose zlib streams live in C memory that
// the JVM mallocs and frees (end()) outside its Java heap. Prints each thread's compressed total
// and CRC32 of what it inflated back, computed the same however the C side allocates.
import java.util.zip.CRC32;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public class ZipThreads {
    public static void main(String[] args) throws Exception {
        int threads = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 200;
        long[] packed = new long[threads];
        long[] crcs = new long[threads];
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            final int id = t;
            ts[t] = new Thread(() -> {
                long seed = 0x9E3779B97F4A7C15L ^ (id + 1);
                CRC32 crc = new CRC32();
                long total = 0;
                for (int r = 0; r < rounds; r++) {
                    seed = seed * 6364136223846793005L + 1442695040888963407L;
                    int size = 4096 + (int) ((seed >>> 33) % 60000);
                    byte[] in = new byte[size];
                    for (int i = 0; i < size; i++) in[i] = (byte) ("corpus".charAt(i % 6) + (i / 97 + r) % 7);
                    Deflater d = new Deflater(1 + r % 9);
                    d.setInput(in);
                    d.finish();
                    byte[] out = new byte[size + 64];
                    int n = 0;
                    while (!d.finished()) n += d.deflate(out, n, out.length - n);
                    d.end();
                    Inflater f = new Inflater();
                    f.setInput(out, 0, n);
                    byte[] back = new byte[size];
                    int m = 0;
                    try {
                        while (!f.finished()) m += f.inflate(back, m, back.length - m);
                    } catch (java.util.zip.DataFormatException e) {
                        throw new RuntimeException(e);
                    }
                    f.end();
                    if (m != size) throw new RuntimeException("inflated " + m + " of " + size);
                    crc.update(back, 0, m);
                    total += n;
                }
                packed[id] = total;
                crcs[id] = crc.getValue();
            });
            ts[t].start();
        }
        StringBuilder sb = new StringBuilder();
        for (int t = 0; t < threads; t++) {
            ts[t].join();
            sb.append(t).append(':').append(packed[t]).append(':').append(Long.toHexString(crcs[t])).append(' ');
        }
        System.out.println(sb.toString().trim());
    }
}
