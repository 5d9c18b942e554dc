#!/usr/bin/env python3
"""Validate OpenADR 2.0b documents against the official 2.0b XSD.

Usage: xsd_validate.py [--parse] DIR

Every *.xml file in DIR is parsed (no network, no entity expansion) and validated with lxml
against the oadr_20b.xsd that the openleadr package bundles. With --parse, each valid file is
also handed to openleadr's own message parser (`openleadr.messaging.parse_message`, what its
VTN runs on every request), so that date-time, duration and boolean spellings are checked
against a real peer too. Each file gets one line, `VALID name` or `INVALID name:line: message`
(one line per error), then a summary line `checked N files, M invalid`.

Exit status: 0 when every file is valid, 1 when any is invalid or not well-formed, 2 on a usage
or setup error (no such directory, no files, openleadr/lxml missing).

Used by tests/xsd.rs with the interpreter of the venv that tests/peers/setup.sh creates
(`pip install openleadr==0.5.36`, which brings lxml).
"""

import os
import sys


def main(argv):
    parse = "--parse" in argv[1:]
    argv = [a for a in argv if a != "--parse"]
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        import openleadr
        import openleadr.messaging
        from lxml import etree
    except ImportError as e:
        print(f"setup error: {e} (run `bash tests/peers/setup.sh`)", file=sys.stderr)
        return 2
    xsd = os.path.join(os.path.dirname(openleadr.__file__), "schema", "oadr_20b.xsd")
    schema = etree.XMLSchema(etree.parse(xsd))
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)

    directory = argv[1]
    files = sorted(f for f in os.listdir(directory) if f.endswith(".xml"))
    if not files:
        print(f"no .xml files in {directory}", file=sys.stderr)
        return 2
    invalid = 0
    for name in files:
        path = os.path.join(directory, name)
        try:
            doc = etree.parse(path, parser)
        except etree.XMLSyntaxError as e:
            invalid += 1
            print(f"INVALID {name}: not well-formed: {e}")
            continue
        if schema.validate(doc):
            if parse:
                try:
                    with open(path, "rb") as f:
                        message_type, _ = openleadr.messaging.parse_message(f.read())
                except Exception as e:  # noqa: BLE001 - report whatever openleadr raises
                    invalid += 1
                    print(f"INVALID {name}:0: openleadr could not parse it: {type(e).__name__}: {e}")
                    continue
                print(f"VALID {name} ({message_type})")
            else:
                print(f"VALID {name}")
        else:
            invalid += 1
            for err in schema.error_log:
                print(f"INVALID {name}:{err.line}: {err.message}")
    print(f"checked {len(files)} files, {invalid} invalid")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
