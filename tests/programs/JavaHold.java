// A Java program to inspect while it pauses (`alloclab inspect`'s tests): MIB (64) MiB of 4 KiB arrays kept
// on the Java heap; it says "paused" on stderr, waits for a line on stdin, then prints their checksum.
public class JavaHold {
    public static void main(String[] a) throws Exception {
        int mib = a.length > 0 ? Integer.parseInt(a[0]) : 64;
        byte[][] keep = new byte[mib * 256][];
        for (int i = 0; i < keep.length; i++) { keep[i] = new byte[4096]; java.util.Arrays.fill(keep[i], (byte) i); }
        System.err.println("paused");
        System.in.read();
        long s = 0; for (int i = 0; i < keep.length; i++) s += keep[i][i % 4096];
        System.out.println(s);
    }
}
