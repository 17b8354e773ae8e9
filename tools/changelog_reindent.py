"""changelogs/changelog.yaml with its lists indented, as ansible-lint's yaml rule (yamllint's
indentation, sequences indented) wants it in the collection's tarball: antsibull-changelog
writes them flush; `make changelog` runs this after the tool. The data is the tool's, unchanged.

    .venv/bin/python tools/changelog_reindent.py ansible_collections/gpuhost/stack/changelogs/changelog.yaml
"""
import sys

import yaml


class Indented(yaml.SafeDumper):
    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


path = sys.argv[1] if len(sys.argv) > 1 else "changelogs/changelog.yaml"
with open(path) as f:
    data = yaml.safe_load(f)
with open(path, "w") as f:
    f.write("---\n" + yaml.dump(data, Dumper=Indented, sort_keys=False, width=100, allow_unicode=True))
