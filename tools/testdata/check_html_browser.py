"""ctest HtmlSummary.RendersInHeadlessChromium: the --html page of a failing fuzz opened in a real
browser (Debian's chromium, headless). The DOM the browser built must hold every tensor of the
margin table, every bucket and one SVG bar per tensor, and a screenshot of it must not be blank.
Exit 77 (ctest: skipped, with the reason printed) when no chromium is installed."""
import json, os, shutil, subprocess, sys, tempfile, zlib, struct

binary = sys.argv[1]
browser = next((b for b in (os.environ.get("DSA_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
                            shutil.which("google-chrome")) if b), None)
if not browser:
    print("skipped: no headless browser (Debian: apt-get install chromium; or set DSA_CHROMIUM)")
    sys.exit(77)
d = tempfile.mkdtemp(prefix="dsa-html-browser-")
rc = subprocess.run([binary, "fuzz", "--backend", "mutant:kl_reversed", "--profile", "smoke", "--cases", "6",
                     "--corpus", "none", "--report", os.path.join(d, "r.json"), "--html", os.path.join(d, "r.html")],
                    stdout=subprocess.DEVNULL).returncode
assert rc == 1, rc
url = "file://" + os.path.join(d, "r.html")
flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + os.path.join(d, "profile")]
dom = subprocess.run([browser] + flags + ["--dump-dom", url], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     universal_newlines=True, timeout=120).stdout
report = json.load(open(os.path.join(d, "r.json")))
margins, buckets = report["summary"]["margins"], report["summary"]["buckets"]
assert "<svg" in dom, "the browser built no SVG:\n" + dom[:2000]
for m in margins:
    assert m["tensor"] in dom, m
for b in buckets:
    assert b["bucket"] in dom, b
assert dom.count("<rect") >= len(margins), (dom.count("<rect"), len(margins))

png = os.path.join(d, "r.png")
subprocess.run([browser] + flags + ["--screenshot=" + png, "--window-size=1200,900", url], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL, timeout=120)
data = open(png, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG screenshot"
# Decode the IDAT stream (8-bit RGB/RGBA, filters do not matter for "are the bytes all equal").
pos, idat, width = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IHDR":
        width = struct.unpack(">I", data[pos + 8:pos + 12])[0]
    if kind == b"IDAT":
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
assert len(set(raw[:: max(1, len(raw) // 200000)])) > 8, "the screenshot is blank"
print("ok: %d tensors, %d buckets, %d SVG rects, screenshot %d px wide, %d bytes" %
      (len(margins), len(buckets), dom.count("<rect"), width, len(data)))
