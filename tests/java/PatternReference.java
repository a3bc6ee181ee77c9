// What a Pulsar broker (master) makes of a topic-list pattern, for the differential test
// tests/integration/test_patterns_against_java.py: TopicsPatternFactory's RE2J_WITH_JDK_FALLBACK
// (RE2J first; only RE2J's PatternSyntaxException falls back to java.util.regex), `.*` as
// matchAll, and Java's matcher(name).matches() on each name.
//
// Protocol (stdin to stdout, UTF-8 hex so that any character travels on one line):
//   in:  a line with the number of names, one line per name, then one line per pattern
//   out: one line per pattern, in order:
//        "re2j <bits>" or "jdk <bits>" (one 0/1 per name: whether it matches), or
//        "error <hex of the JDK's description + ' near index ' + index>", or
//        "other <hex of the exception>" (anything else the compile or a match throws)
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.function.Predicate;

public final class PatternReference {
    private static final HexFormat HEX = HexFormat.of();

    private static String text(String hex) {
        return new String(HEX.parseHex(hex), StandardCharsets.UTF_8);
    }

    private static String hex(String text) {
        return HEX.formatHex(text.getBytes(StandardCharsets.UTF_8));
    }

    private static String answer(String regex, List<String> names) {
        String engine;
        Predicate<String> matches;
        if (regex.equals(".*")) {
            engine = "re2j";
            matches = name -> true;
        } else {
            try {
                com.google.re2j.Pattern re2j = com.google.re2j.Pattern.compile(regex);
                engine = "re2j";
                matches = name -> re2j.matcher(name).matches();
            } catch (com.google.re2j.PatternSyntaxException refused) {
                try {
                    java.util.regex.Pattern jdk = java.util.regex.Pattern.compile(regex);
                    engine = "jdk";
                    matches = name -> jdk.matcher(name).matches();
                } catch (java.util.regex.PatternSyntaxException error) {
                    return "error " + hex(error.getDescription() + " near index " + error.getIndex());
                }
            }
        }
        StringBuilder bits = new StringBuilder(engine).append(' ');
        for (String name : names) {
            bits.append(matches.test(name) ? '1' : '0');
        }
        return bits.toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.US_ASCII);
        int count = Integer.parseInt(in.readLine().trim());
        List<String> names = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            names.add(text(in.readLine().trim()));
        }
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String result;
            try {
                result = answer(text(line.trim()), names);
            } catch (RuntimeException | StackOverflowError other) {
                result = "other " + hex(other.toString());
            }
            out.println(result);
        }
        out.flush();
    }
}
