"""ctest HtmlSummary.WellFormedAndNamesEveryTensor: runs a failing fuzz with --html and --report,
parses the page as XML (it is XHTML) and checks it names every tensor of the report's margins and
every bucket, with no script and no external asset."""
import json, os, subprocess, sys, tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

binary = sys.argv[1]
d = tempfile.mkdtemp(prefix="dsa-html-")
rc = subprocess.run([binary, "fuzz", "--backend", "mutant:kl_reversed", "--profile", "smoke", "--cases", "6",
                     "--corpus", "none", "--report", os.path.join(d, "r.json"), "--html", os.path.join(d, "r.html")],
                    stdout=subprocess.DEVNULL).returncode
assert rc == 1, rc
page = open(os.path.join(d, "r.html"), encoding="utf-8").read()
root = ET.fromstring(page.encode("utf-8"))  # well-formed XML, or this raises
ns = "{http://www.w3.org/1999/xhtml}"
assert root.tag == ns + "html", root.tag
assert root.find(".//{http://www.w3.org/2000/svg}svg") is not None, "no inline SVG"
HTMLParser().feed(page)
text = "".join(root.itertext())
report = json.load(open(os.path.join(d, "r.json")))
margins = report["summary"]["margins"]
assert len(margins) >= 10, margins
for m in margins:
    assert m["stage"] + " " + m["tensor"] in text, m
for b in report["summary"]["buckets"]:
    assert b["bucket"] in text, b
for bad in ("<script", "<link", "src=", "href="):
    assert bad not in page, bad
print("ok:", len(margins), "tensors,", len(report["summary"]["buckets"]), "buckets")
