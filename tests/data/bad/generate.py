#!/usr/bin/env python3
"""Generates the bad-input corpus in tests/data/bad/ (run from anywhere; stdlib only).

Every case is one malformed HapConfig or AccountClaim manifest with a header comment saying
where it must be rejected, and one entry in cases.yaml, the machine-readable index that
tests/e2e_bad_input.rs reads:

  - id: unique name
    file: path relative to tests/data/bad/
    kind: HapConfig | AccountClaim
    expect: apply | status
    # apply:  `kubectl apply -f FILE` must fail, and its message must contain `field`
    #         (the field path the API server names) and `substring` when given.
    # status: the API server accepts the object; then
    #   HapConfig:    condition `condition` is False with reason `reason`, and the message
    #                 names `rule <index>` (when index is set) and contains `substring`;
    #   AccountClaim: the Ready condition has reason `reason` and its message contains
    #                 `substring`.
    field / condition / reason / index / substring
    setup: a file applied first that must succeed (immutable-field edits)

The test substitutes three placeholders before applying: metadata.name of status-time
HapConfigs (`bad-config-in-force`) becomes the config the test's operator serves,
`garden-bad-input` becomes its binding namespace, and claims get the test's namespace with `-n`.

`python3 tests/data/bad/generate.py --check HAP` also runs `HAP validate -o json -f FILE` on every
status-time HapConfig and reports cases whose expected index or text the CLI does not produce
(the CLI and the operator share one validator).
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PLACEHOLDER_NS = "garden-bad-input"
IN_FORCE = "bad-config-in-force"

# ----------------------------------------------------------------------------------------------
# A tiny YAML emitter: block mappings and sequences, every string double-quoted with explicit
# escapes for anything outside printable ASCII, so that invisible characters stay visible.


def quote(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        elif o <= 0xFF:
            out.append("\\x%02X" % o)
        elif o <= 0xFFFF:
            out.append("\\u%04X" % o)
        else:
            out.append("\\U%08X" % o)
    out.append('"')
    return "".join(out)


def scalar(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return quote(v)


def key(k):
    if k.replace("-", "").replace("_", "").isalnum() and k.isascii() and not k[0].isdigit():
        return k
    return quote(k)


def emit(v, indent=0):
    pad = "  " * indent
    lines = []
    if isinstance(v, dict):
        if not v:
            return [pad + "{}"]
        for k, val in v.items():
            if isinstance(val, (dict, list)) and val:
                lines.append(f"{pad}{key(k)}:")
                lines.extend(emit(val, indent + 1))
            elif isinstance(val, dict):
                lines.append(f"{pad}{key(k)}: {{}}")
            elif isinstance(val, list):
                lines.append(f"{pad}{key(k)}: []")
            else:
                lines.append(f"{pad}{key(k)}: {scalar(val)}")
    elif isinstance(v, list):
        for item in v:
            if isinstance(item, (dict, list)) and item:
                sub = emit(item, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            elif isinstance(item, dict):
                lines.append(f"{pad}- {{}}")
            elif isinstance(item, list):
                lines.append(f"{pad}- []")
            else:
                lines.append(f"{pad}- {scalar(item)}")
    else:
        lines.append(pad + scalar(v))
    return lines


# ----------------------------------------------------------------------------------------------

CASES = []
SEEN_BODIES = set()


def add(group, slug, kind, body, expect, header, setup=None, **exp):
    n = sum(1 for c in CASES if c["group"] == group) + 1
    path = f"{group}/{n:03d}-{slug}.yaml"
    text = emit(body)
    sig = (kind, "\n".join(text) if expect == "apply" else json.dumps(body.get("spec"), sort_keys=True))
    assert sig not in SEEN_BODIES, f"duplicate case body: {path}"
    SEEN_BODIES.add(sig)
    case = {"id": f"{group}-{n:03d}", "file": path, "kind": kind, "expect": expect}
    case.update({k: v for k, v in exp.items() if v is not None})
    if setup is not None:
        setup_path = f"{group}/setup/{n:03d}-{slug}.yaml"
        case["setup"] = setup_path
        CASES.append({"group": group, "case": case, "text": text, "header": header,
                      "setup": (setup_path, emit(setup))})
    else:
        CASES.append({"group": group, "case": case, "text": text, "header": header})


def hapconfig(name, spec):
    return {"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
            "metadata": {"name": name}, "spec": spec}


def claim(name, spec):
    return {"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
            "metadata": {"name": name}, "spec": spec}


# ----------------------------------------------------------------------------------------------
# 1. Rule entries (status: RulesValid=False, reason Invalid, message names the entry's index).

BASE = ["aws", "azure(euAccess=*)", "gcp(PR=cf-sa30)", "trial(shared)"]


def rule_case(slug, bad, substring, why, pos=None, base=None, syntax=None, index=None, extra=None):
    base = list(BASE if base is None else base)
    n = sum(1 for c in CASES if c["group"] == "rules")
    if pos is None:
        pos = n % (len(base) + 1)
    rules = base[:pos] + [bad] + base[pos:]
    spec = {"bindingNamespace": PLACEHOLDER_NS}
    if syntax:
        spec["ruleSyntax"] = syntax
    spec["rules"] = rules
    if extra:
        spec.update(extra)
    idx = pos + 1 if index is None else index
    header = f"rule entry {idx} {bad!r}: {why}"
    add("rules", slug, "HapConfig", hapconfig(IN_FORCE, spec), "status", header,
        condition="RulesValid", reason="Invalid", index=idx, substring=substring)


P = "unexpected character"
# -- syntax errors
for slug, bad, sub, why in [
    ("empty", "", "the entry is empty", "an empty entry"),
    ("blank", "   ", "the entry is empty", "only spaces"),
    ("open-paren", "aws(", "missing `)`", "attribute list never closed"),
    ("open-paren-attr", "aws(PR=cf-eu11", "missing `)`", "attribute list never closed after a value"),
    ("close-paren", "aws)", "`)`", "a closing parenthesis without an opening one"),
    ("double-open", "aws((PR=cf-eu11))", "column 5", "nested parentheses"),
    ("no-plan", "(PR=cf-eu11)", "column 1", "attributes without a plan"),
    ("empty-pr", "aws(PR=)", "PR is empty", "PR without a value"),
    ("empty-cr", "aws(CR=)", "CR is empty", "CR without a value"),
    ("empty-hr", "aws(HR=)", "is empty", "HR (alias of CR) without a value"),
    ("no-key", "aws(=cf-eu11)", "column 5", "a value without an attribute name"),
    ("unknown-attr", "aws(XX=1)", "unknown attribute `XX`", "an attribute that does not exist"),
    ("unknown-attr-region", "aws(region=eu)", "unknown attribute `region`", "`region` is not an attribute"),
    ("lowercase-pr", "aws(pr=cf-eu11)", "unknown attribute `pr`", "keys are case-sensitive"),
    ("mixedcase-pr", "aws(Pr=cf-eu11)", "unknown attribute `Pr`", "keys are case-sensitive"),
    ("uppercase-shared", "aws(SHARED)", "unknown attribute `SHARED`", "keys are case-sensitive"),
    ("lowercase-euaccess", "aws(euaccess)", "unknown attribute `euaccess`", "keys are case-sensitive"),
    ("pr-twice", "aws(PR=cf-eu10, PR=cf-eu11)", "`PR` is already set", "PR given twice"),
    ("cr-hr", "aws(CR=eu-1, HR=eu-2)", "already set", "CR and its alias HR both given"),
    ("shared-twice", "aws(shared, shared)", "`shared` is already set", "shared given twice"),
    ("euaccess-twice", "aws(euAccess, euAccess=*)", "`euAccess` is already set", "euAccess given twice"),
    ("euaccess-maybe", "aws(euAccess=maybe)", "`euAccess` takes", "euAccess takes true, false or *"),
    ("shared-yes", "aws(shared=yes)", "`shared` takes", "shared takes true or false"),
    ("shared-star", "aws(shared=*)", "`shared` takes", "shared has no wildcard"),
    ("pr-space", "aws(PR=cf eu11)", "column 11", "a space inside a value"),
    ("pr-slash", "aws(PR=cf/eu11)", P, "a slash inside a value"),
    ("trailing-comma", "aws(PR=cf-eu11,)", "column 16", "a trailing comma"),
    ("leading-comma", "aws(,PR=cf-eu11)", "column 5", "a leading comma"),
    ("double-equals", "aws(PR==cf-eu11)", "column 8", "`==`"),
    ("extra-close", "aws(PR=cf-eu11))", "column 16", "one `)` too many"),
    ("two-lists", "aws()()", "nothing may follow the attribute list", "two attribute lists"),
    ("reversed-parens", "aws)(", "column 4", "parentheses the wrong way round"),
    ("trailing-text", "aws(PR=cf-eu11)x", "nothing may follow the attribute list", "text after `)`"),
    ("two-words", "aws gcp", "column 5", "two plans in one entry"),
    ("comma-list", "aws,gcp", "column 4", "a comma-separated list in one entry"),
    ("semicolon-list", "aws;gcp", "one rule entry per list item", "a semicolon-separated list"),
    ("keb-arrow", "aws -> EU", "`->` belongs to the KEB syntax", "KEB output syntax in a Seed rule"),
    ("keb-arrow-attrs", "aws(PR=cf-eu11) -> S", "`->` belongs to the KEB syntax", "KEB output after attributes"),
    ("hash-comment", "aws # EU pool", "column 5", "a comment"),
    ("slash-comment", "aws // EU pool", "column 5", "a C++ comment"),
    ("single-quoted", "'aws'", "column 1", "quotes around the plan"),
    ("double-quoted", "\"aws\"", "column 1", "double quotes around the plan"),
    ("quoted-value", "aws(PR='cf-eu11')", "column 8", "a quoted value"),
    ("brackets", "aws[PR=cf-eu11]", "column 4", "square brackets"),
    ("braces", "aws{PR=cf-eu11}", "column 4", "braces"),
    ("angle", "aws<PR=cf-eu11>", "column 4", "angle brackets"),
    ("colon", "aws(PR:cf-eu11)", "column 7", "`:` instead of `=`"),
    ("no-equals", "aws(PR cf-eu11)", "column 8", "a missing `=`"),
    ("star-prefix", "aws(PR=*eu)", "column", "a wildcard glued to text"),
    ("star-suffix", "aws(PR=cf-*)", "column", "a partial wildcard"),
    ("double-star", "aws(PR=**)", "column", "`**`"),
    ("cr-no-value", "aws(PR=cf-eu11, CR)", "column", "CR without `=value`"),
    ("pr-no-value", "aws(PR)", "column", "PR without `=value`"),
    ("not-equals", "aws(PR!=cf-eu11)", "column", "`!=` is no rule syntax"),
    ("set-syntax", "aws(PR in (cf-eu10, cf-eu11))", "column", "selector set syntax"),
    ("pipe", "aws(PR=cf-eu10|cf-eu11)", "column", "alternatives with `|`"),
    ("ampersand", "aws(PR=cf-eu10&CR=eu-1)", "column", "`&` instead of `,`"),
    ("value-with-equals", "aws(PR=a=b)", "column", "`=` inside a value"),
    ("negation", "!aws", "column 1", "a negated plan"),
    ("selector-style", "hyperscalerType=aws", "column", "a label selector instead of a rule"),
    ("yaml-item", "- aws", "column 3", "a YAML list marker inside the entry"),
    ("yaml-map", "aws: {PR: cf-eu11}", "column 4", "a YAML mapping inside the entry"),
    ("json-object", "{\"plan\": \"aws\"}", "column 1", "a JSON object"),
    ("two-attr-lists-wild", "aws(PR=*)(CR=*)", "nothing may follow the attribute list", "two wildcard lists"),
]:
    rule_case(slug, bad, sub, why)

# -- unicode
for slug, bad, sub, why in [
    ("cyrillic-a", "\u0430ws", "column 1", "Cyrillic `а` that looks like `a`"),
    ("greek-alpha", "\u03b1ws", "column 1", "Greek alpha"),
    ("fullwidth", "\uff41\uff57\uff53", "column 1", "full-width letters"),
    ("zero-width-space", "aws\u200b", "column 4", "a zero-width space after the plan"),
    ("zero-width-joiner-in-value", "aws(PR=cf-\u200deu11)", "column", "a zero-width joiner in a value"),
    ("bom", "\ufeffaws", "column 1", "a byte-order mark"),
    ("rtl-override", "aws(PR=\u202ecf-eu11)", "column", "a right-to-left override in a value"),
    ("nbsp-in-value", "aws(PR=cf\u00a0eu11)", "column 11", "a no-break space inside a value"),
    ("accent-value", "aws(PR=caf\u00e9)", "column", "a non-ASCII letter in a value"),
    ("combining-accent", "aws(PR=cafe\u0301)", "column", "a combining accent in a value"),
    ("eszett", "aws(CR=stra\u00dfe)", "column", "`ß` in a value"),
    ("emoji-value", "aws(PR=\U0001f680)", "column", "an emoji as a value"),
    ("emoji-plan", "\U0001f680", "column 1", "an emoji as the plan"),
    ("unicode-hyphen", "aws(PR=cf\u2010eu11)", "column", "a Unicode hyphen"),
    ("en-dash", "aws(CR=eu\u2013de\u20131)", "column", "en dashes"),
    ("fullwidth-digits", "aws(PR=cf-eu\uff11\uff11)", "column", "full-width digits"),
    ("fullwidth-paren", "aws\uff08PR=cf-eu11\uff09", "column 4", "full-width parentheses"),
    ("control-bell", "aws\u0007", "column 4", "a control character"),
    ("nul", "aws\u0000", "column 4", "a NUL character"),
    ("escape-seq", "aws\u001b[31m", "column 4", "an ANSI escape sequence"),
    ("line-separator", "aws\u2028gcp", "column 5", "a Unicode line separator between two plans"),
    ("cjk-plan", "\u4e9a\u9a6c\u900a", "column 1", "a plan in CJK characters"),
    ("turkish-i", "a\u0131ws", "column 2", "a dotless i"),
    ("mathematical-bold", "\U0001d41a\U0001d430\U0001d42c", "column 1", "mathematical bold letters"),
]:
    rule_case(slug, bad, sub, why)

# -- injection-looking strings
for slug, bad, sub, why in [
    ("shell-subst", "aws(PR=$(whoami))", "column 8", "shell command substitution"),
    ("backticks", "aws(PR=`id`)", "column 8", "shell backticks"),
    ("shell-rm", "aws(PR=cf-eu11);rm -rf /", "one rule entry per list item", "a shell command after `;`"),
    ("shell-and", "aws && curl evil.example", "column 5", "`&&` and a command"),
    ("shell-pipe", "aws | sh", "column 5", "a pipe"),
    ("sql", "aws(PR=cf-eu11'); DROP TABLE rules;--", "column", "SQL injection"),
    ("html", "<script>alert(1)</script>", "column 1", "an HTML script tag"),
    ("go-template", "{{ .Values.plan }}", "column 1", "a Go template"),
    ("env-var", "${PLAN}", "column 1", "an environment variable"),
    ("path-traversal", "aws(PR=../../etc/passwd)", "column", "path traversal"),
    ("url-encoded", "aws(PR=%2e%2e)", "column 8", "URL encoding"),
    ("sql-or", "aws\" OR 1=1", "column 4", "a quote and a tautology"),
    ("ldap", "*)(uid=*", "column 1", "LDAP filter injection"),
    ("jsonpath", "$.spec.rules[0]", "column 1", "a JSONPath"),
    ("crlf", "aws\r\nX-Injected: 1", "column 16", "CRLF header injection"),
    ("backslash", "aws(PR=cf\\eu11)", "column", "a backslash"),
    ("format-string", "aws(PR=%s%s%n)", "column 8", "printf format directives"),
    ("label-injection", "aws(PR=x,tenantName=ga)", "unknown attribute `tenantName`", "a label key as an attribute"),
]:
    rule_case(slug, bad, sub, why)

# -- unknown plans
for slug, bad, sub, why in [
    ("typo-azure", "azurre", "did you mean `azure`", "a typo of azure"),
    ("typo-gcp", "gpc", "not supported", "a typo of gcp"),
    ("amazon", "amazon", "not supported", "not a plan"),
    ("uppercase-plan", "AWS", "not supported", "plan names are lowercase"),
    ("capitalised-plan", "Aws(PR=cf-eu11)", "not supported", "plan names are lowercase"),
    ("provider-head", "openstack(CR=*, shared)", "did you mean `sap-converged-cloud`", "a provider type instead of a plan (the seed's own example)"),
    ("provider-head-alicloud-typo", "alibaba", "not supported", "not a plan"),
    ("kyma", "kyma", "not supported", "not a plan"),
    ("aws-lite", "aws_lite", "not supported", "azure_lite exists, aws_lite does not"),
    ("sap-underscores", "sap_converged_cloud", "not supported", "underscores instead of dashes"),
    ("build-runtime", "build-runtime", "not supported", "a prefix of several plans"),
    ("single-letter", "x", "not supported", "one letter"),
    ("digit-plan", "0", "not supported", "a digit"),
    ("long-plan", "a" * 200, "not supported", "a 200-character plan name"),
    ("trial-provider", "trial-aws", "not supported", "provider glued to trial"),
]:
    rule_case(slug, bad, sub, why)

# -- oversized values (within the CRD's 256 characters per entry)
for slug, bad, sub, why in [
    ("pr-70", "aws(PR=" + "r" * 70 + ")", "a label value has at most 63", "hyperscalerType would exceed 63 characters"),
    ("cr-60", "gcp(PR=cf-sa30, CR=" + "c" * 60 + ")", "a label value has at most 63", "PR and CR suffixes together exceed 63"),
    ("pr-240", "azure(PR=" + "p" * 240 + ")", "a label value has at most 63", "a 240-character region"),
    ("pr-dot-end", "aws(PR=cf-eu11.)", "must begin and end with a letter or digit", "a label value must end alphanumeric"),
    ("pr-dash-end", "aws(PR=cf-eu11-)", "must begin and end with a letter or digit", "hyperscalerType would end with `-`"),
]:
    rule_case(slug, bad, sub, why)

# -- duplicates (outputs do not count); index is the later copy
for slug, rules, idx, why in [
    ("dup-plain", ["aws", "gcp", "aws"], 3, "the same entry twice"),
    ("dup-pr", ["gcp", "gcp(PR=cf-sa30)", "gcp(PR=cf-sa30)"], 3, "the same PR entry twice"),
    ("dup-outputs", ["aws(PR=cf-eu11)", "azure", "aws(PR=cf-eu11, euAccess)"], 3, "same conditions, different outputs"),
    ("dup-hr-alias", ["sap-converged-cloud(CR=eu-de-1, shared)", "sap-converged-cloud(HR=eu-de-1, shared)"], 2, "HR is an alias of CR"),
    ("dup-empty-parens", ["aws()", "aws"], 2, "`PLAN()` equals `PLAN`"),
    ("dup-whitespace", ["aws(PR=cf-eu11)", "aws( PR = cf-eu11 )"], 2, "whitespace is insignificant"),
    ("dup-shared", ["trial(shared)", "trial"], 2, "shared is an output, not a condition"),
    ("dup-wildcard", ["aws(PR=*)", "gcp", "aws(PR=*)"], 3, "the same wildcard entry twice"),
    ("dup-attr-order", ["gcp(PR=cf-sa30, CR=me-central2)", "gcp(CR=me-central2, PR=cf-sa30)"], 2, "attribute order does not matter"),
    ("dup-euaccess-star", ["azure(euAccess=*)", "azure(euAccess)"], 2, "euAccess is an output"),
]:
    spec = {"bindingNamespace": PLACEHOLDER_NS, "rules": rules}
    add("rules", slug, "HapConfig", hapconfig(IN_FORCE, spec), "status",
        f"duplicate: entry {idx} repeats an earlier one ({why})",
        condition="RulesValid", reason="Invalid", index=idx, substring="same plan and conditions")

# -- ambiguous sets (a request matching both equally well)
for slug, rules, idx, why in [
    ("amb-pr-cr", ["gcp(PR=cf-sa30)", "gcp(CR=me-central2)"], 2, "PR-only and CR-only entries without the entry that has both"),
    ("amb-wild", ["aws(PR=*)", "aws(CR=*)"], 2, "wildcard PR-only and CR-only entries"),
    ("amb-cross", ["aws(PR=cf-eu11, CR=*)", "aws(PR=*, CR=eu-central-1)"], 2, "crossed exact and wildcard pairs"),
    ("amb-azure", ["azure", "azure(PR=cf-eu10)", "azure(CR=westeurope)"], 3, "a pair among three entries"),
    ("amb-scc", ["sap-converged-cloud(PR=cf-eu20, shared)", "sap-converged-cloud(CR=eu-de-1, shared)"], 2, "shared entries are ambiguous too"),
]:
    spec = {"bindingNamespace": PLACEHOLDER_NS, "rules": rules}
    add("rules", slug, "HapConfig", hapconfig(IN_FORCE, spec), "status",
        f"ambiguous: {why}; the later entry is named", condition="RulesValid", reason="Invalid", index=idx,
        substring="are ambiguous")

# -- KEB syntax (ruleSyntax: KEB) with Seed-isms and KEB errors
for slug, bad, sub, why in [
    ("keb-seed-shared", "aws(shared)", "column", "Seed attributes in KEB syntax"),
    ("keb-unknown-output", "aws -> XX", "column", "an output KEB does not know"),
    ("keb-empty-output", "aws ->", "column", "an arrow without outputs"),
    ("keb-trailing", "aws(PR=cf-eu11)y", "column", "text after `)` (upstream swallows it)"),
    ("keb-double-arrow", "aws -> S -> EU", "column", "two arrows"),
    ("keb-output-comma", "aws -> EU,", "column", "a trailing comma after the outputs"),
]:
    rule_case(slug, bad, sub, why, syntax="KEB",
              base=["aws", "azure(PR=cf-ch20) -> EU", "trial -> S"])

# ----------------------------------------------------------------------------------------------
# 2. HapConfigs rejected by the API server (apply).

GOOD = {"bindingNamespace": PLACEHOLDER_NS, "rules": ["aws"]}


def cfg_apply(slug, spec, field, why, substring=None, name=None, raw=None):
    name = name or f"bad-cfg-{slug}"[:63]
    body = raw if raw is not None else hapconfig(name, spec)
    add("config-apply", slug, "HapConfig", body, "apply", f"rejected by the API server: {why}",
        field=field, substring=substring)


def with_(**kv):
    s = dict(GOOD)
    for k, v in kv.items():
        if v is DELETE:
            s.pop(k, None)
        else:
            s[k] = v
    return s


DELETE = object()

cfg_apply("missing-binding-namespace", with_(bindingNamespace=DELETE), "spec.bindingNamespace", "bindingNamespace is required", "Required value")
cfg_apply("empty-binding-namespace", with_(bindingNamespace=""), "spec.bindingNamespace", "an empty namespace")
cfg_apply("uppercase-binding-namespace", with_(bindingNamespace="Garden-Kyma"), "spec.bindingNamespace", "namespaces are lowercase")
cfg_apply("underscore-binding-namespace", with_(bindingNamespace="garden_kyma"), "spec.bindingNamespace", "no underscores in namespaces")
cfg_apply("long-binding-namespace", with_(bindingNamespace="g" * 64), "spec.bindingNamespace", "64 characters")
cfg_apply("unicode-binding-namespace", with_(bindingNamespace="garden-k\u00fdma"), "spec.bindingNamespace", "non-ASCII namespace")
cfg_apply("number-binding-namespace", with_(bindingNamespace=42), "spec.bindingNamespace", "a number", "must be of type string")
cfg_apply("list-binding-namespace", with_(bindingNamespace=["garden"]), "spec.bindingNamespace", "a list", "must be of type string")
cfg_apply("injection-binding-namespace", with_(bindingNamespace="garden; rm -rf /"), "spec.bindingNamespace", "shell text")
cfg_apply("both-rule-kinds", with_(legacyRules={"sharedRule": "trial"}), "spec", "rules and legacyRules together", "mutually exclusive")
cfg_apply("no-rules", with_(rules=DELETE), "spec", "neither rules nor legacyRules", "one of rules or legacyRules is required")
cfg_apply("syntax-with-legacy", {"bindingNamespace": PLACEHOLDER_NS, "ruleSyntax": "KEB", "legacyRules": {"sharedRule": "trial"}}, "spec", "ruleSyntax with legacyRules", "ruleSyntax applies to rules only")
cfg_apply("empty-rules", with_(rules=[]), "spec.rules", "an empty rule list", "at least 1")
cfg_apply("huge-rules", with_(rules=[f"aws(PR=cf-r{i})" for i in range(1001)]), "spec.rules", "1001 entries (at most 1000)", "at most 1000")
cfg_apply("long-entry", with_(rules=["aws(PR=" + "r" * 250 + ")"]), "spec.rules[0]", "an entry of 258 characters", "256")
cfg_apply("rules-string", with_(rules="aws"), "spec.rules", "a string instead of a list", "must be of type array")
cfg_apply("rules-numbers", with_(rules=[1, 2]), "spec.rules[0]", "numbers as entries", "must be of type string")
cfg_apply("rules-null-entry", with_(rules=["aws", None]), "spec.rules[1]", "a null entry")
cfg_apply("rules-nested", with_(rules=[["aws"]]), "spec.rules[0]", "a nested list", "must be of type string")
cfg_apply("rules-object", with_(rules={"aws": 1}), "spec.rules", "a mapping instead of a list (strict decoding names its key)", "unknown field")
cfg_apply("rules-bool-entry", with_(rules=[True]), "spec.rules[0]", "a boolean entry", "must be of type string")
cfg_apply("syntax-lowercase", with_(ruleSyntax="seed"), "spec.ruleSyntax", "enum values are case-sensitive", "Unsupported value")
cfg_apply("syntax-unknown", with_(ruleSyntax="YAML"), "spec.ruleSyntax", "not a syntax", "Unsupported value")
cfg_apply("syntax-number", with_(ruleSyntax=1), "spec.ruleSyntax", "a number", "must be of type string")
cfg_apply("legacy-string", {"bindingNamespace": PLACEHOLDER_NS, "legacyRules": "trial"}, "spec.legacyRules", "a string instead of the four properties", "must be of type object")
cfg_apply("legacy-long", {"bindingNamespace": PLACEHOLDER_NS, "legacyRules": {"sharedRule": ";".join(["trial"] * 700)}}, "spec.legacyRules.sharedRule", "a 4,199-character property", "Too long")
cfg_apply("legacy-number", {"bindingNamespace": PLACEHOLDER_NS, "legacyRules": {"euAccessRule": 11}}, "spec.legacyRules.euAccessRule", "a number", "must be of type string")
cfg_apply("plan-uppercase-key", with_(plans={"AWS2": {"providerType": "aws"}}), "spec.plans", "plan names are lowercase", "plan names are lowercase")
cfg_apply("plan-empty-spec", with_(plans={"x": {}}), "spec.plans[x]", "neither providerType nor providerFromRequest", "set exactly one of providerType or providerFromRequest")
cfg_apply("plan-both", with_(plans={"x": {"providerType": "aws", "providerFromRequest": True}}), "spec.plans[x]", "both providerType and providerFromRequest", "set exactly one")
cfg_apply("plan-provider-uppercase", with_(plans={"x": {"providerType": "AWS"}}), "spec.plans.x.providerType", "provider types are lowercase")
cfg_apply("plan-provider-long", with_(plans={"x": {"providerType": "p" * 33}}), "spec.plans.x.providerType", "33 characters (at most 32)")
cfg_apply("plan-from-request-string", with_(plans={"x": {"providerFromRequest": "yes"}}), "spec.plans.x.providerFromRequest", "a string instead of a boolean", "must be of type boolean")
cfg_apply("plans-list", with_(plans=["x"]), "spec.plans", "a list instead of a mapping", "must be of type object")
cfg_apply("plan-key-unicode", with_(plans={"pl\u00e4n": {"providerType": "aws"}}), "spec.plans", "a non-ASCII plan name", "plan names are lowercase")
cfg_apply("required-plans-huge", with_(requiredPlans=[f"plan-{i}" for i in range(101)]), "spec.requiredPlans", "101 required plans (at most 100)", "at most 100")
cfg_apply("required-plans-string", with_(requiredPlans="aws"), "spec.requiredPlans", "a string instead of a list", "must be of type array")
cfg_apply("eu-regions-huge", with_(euAccessPlatformRegions=[f"cf-eu{i}" for i in range(101)]), "spec.euAccessPlatformRegions", "101 regions (at most 100)", "at most 100")
cfg_apply("eu-regions-object", with_(euAccessPlatformRegions={"cf-eu11": True}), "spec.euAccessPlatformRegions", "a mapping instead of a list (strict decoding names its key)", "unknown field")
cfg_apply("label-key-space", with_(labelKeys={"tenantName": "tenant name"}), "spec.labelKeys.tenantName", "a space in a label key")
cfg_apply("label-key-dash-start", with_(labelKeys={"dirty": "-dirty"}), "spec.labelKeys.dirty", "a label key must start alphanumeric")
cfg_apply("label-key-long", with_(labelKeys={"shared": "s" * 318}), "spec.labelKeys.shared", "318 characters")
cfg_apply("label-key-two-slashes", with_(labelKeys={"euAccess": "a.io/b/c"}), "spec.labelKeys.euAccess", "two slashes")
cfg_apply("label-key-uppercase-prefix", with_(labelKeys={"internal": "Example.COM/internal"}), "spec.labelKeys.internal", "a prefix must be a lowercase DNS subdomain")
cfg_apply("label-key-unicode", with_(labelKeys={"hyperscalerType": "hyperscaler\u00dfType"}), "spec.labelKeys.hyperscalerType", "a non-ASCII label key")
cfg_apply("label-key-empty", with_(labelKeys={"tenantName": ""}), "spec.labelKeys.tenantName", "an empty label key")
cfg_apply("label-keys-string", with_(labelKeys="tenantName"), "spec.labelKeys", "a string instead of a mapping", "must be of type object")
cfg_apply("binding-kind-unknown", with_(bindingKind="Secret"), "spec.bindingKind", "not a binding kind", "Unsupported value")
cfg_apply("shoot-namespace-invalid", with_(shootNamespace="Shoots!"), "spec.shootNamespace", "an invalid namespace")
cfg_apply("limit-zero", with_(multiHyperscalerAccount={"allowedGlobalAccounts": ["*"], "limits": {"aws": 0}}), "spec.multiHyperscalerAccount.limits", "a limit of 0", "every limit must be at least 1")
cfg_apply("limit-negative", with_(multiHyperscalerAccount={"allowedGlobalAccounts": ["*"], "limits": {"default": -5}}), "spec.multiHyperscalerAccount.limits", "a negative limit", "every limit must be at least 1")
cfg_apply("limit-string", with_(multiHyperscalerAccount={"limits": {"aws": "3"}}), "spec.multiHyperscalerAccount.limits.aws", "a string limit", "must be of type integer")
cfg_apply("limit-float", with_(multiHyperscalerAccount={"limits": {"gcp": 1.5}}), "spec.multiHyperscalerAccount.limits.gcp", "a fractional limit", "must be of type integer")
cfg_apply("limit-beyond-int64", with_(multiHyperscalerAccount={"limits": {"aws": 10**30}}), "spec.multiHyperscalerAccount.limits.aws", "a limit beyond 64 bits")
cfg_apply("allowlist-huge", with_(multiHyperscalerAccount={"allowedGlobalAccounts": [f"ga-{i:05d}" for i in range(10001)]}), "spec.multiHyperscalerAccount.allowedGlobalAccounts", "10,001 global accounts (at most 10,000)", "at most 10000")
cfg_apply("allowlist-string", with_(multiHyperscalerAccount={"allowedGlobalAccounts": "*"}), "spec.multiHyperscalerAccount.allowedGlobalAccounts", "a string instead of a list", "must be of type array")
cfg_apply("release-mode-unknown", with_(release={"mode": "Delete"}), "spec.release.mode", "not a release mode", "Unsupported value")
cfg_apply("release-string", with_(release="Retain"), "spec.release", "a string instead of a mapping", "must be of type object")
cfg_apply("duration-days", with_(internalStateRefreshCycleDuration="1d"), "spec.internalStateRefreshCycleDuration", "days are no Go duration unit", "should match")
cfg_apply("duration-space", with_(internalStateRefreshCycleDuration="24 h"), "spec.internalStateRefreshCycleDuration", "a space in a duration", "should match")
cfg_apply("duration-negative", with_(internalStateRefreshCycleDuration="-1h"), "spec.internalStateRefreshCycleDuration", "a negative duration", "should match")
cfg_apply("duration-no-number", with_(internalStateRefreshCycleDuration="h"), "spec.internalStateRefreshCycleDuration", "a unit without a number", "should match")
cfg_apply("duration-empty", with_(internalStateRefreshCycleDuration=""), "spec.internalStateRefreshCycleDuration", "an empty duration", "should match")
cfg_apply("duration-no-unit", with_(internalStateRefreshCycleDuration="1h30"), "spec.internalStateRefreshCycleDuration", "a number without a unit", "should match")
cfg_apply("duration-word", with_(internalStateRefreshCycleDuration="forever"), "spec.internalStateRefreshCycleDuration", "a word", "should match")
cfg_apply("duration-number", with_(internalStateRefreshCycleDuration=24), "spec.internalStateRefreshCycleDuration", "a bare number", "must be of type string")
cfg_apply("duration-long", with_(internalStateRefreshCycleDuration="1h" * 17), "spec.internalStateRefreshCycleDuration", "34 characters (at most 32)", "Too long")
cfg_apply("unknown-field", with_(rule=["aws"]), "spec.rule", "a typo of `rules`", "unknown field")
cfg_apply("unknown-field-case", with_(BindingNamespace="x"), "spec.BindingNamespace", "field names are case-sensitive", "unknown field")
cfg_apply("missing-spec", None, "spec", "no spec at all", "Required value",
          raw={"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig", "metadata": {"name": "bad-cfg-missing-spec"}})
cfg_apply("spec-string", None, "spec", "spec is a string", "must be of type object",
          raw={"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig", "metadata": {"name": "bad-cfg-spec-string"}, "spec": "rules: [aws]"})
cfg_apply("bad-name", GOOD, "metadata.name", "an object name with uppercase and `_`", name="Bad_Config")

# Issue 13: the fallback constraints and pins the CRD's rules see (entry and column named).
cfg_apply("fallback-eu-to-none", with_(rules=["aws", "aws(PR=cf-eu11, euAccess) | ()"]), "spec.rules[1]", "an EU-access preference falling back to a pool without EU access", "column 27: a fallback from an EU-access pool")
cfg_apply("fallback-eu-star-to-none", with_(rules=["aws(euAccess=*) | ()"]), "spec.rules[0]", "euAccess=* falling back to a pool without EU access", "column 17: a fallback from an EU-access pool")
cfg_apply("fallback-dedicated-to-shared", with_(rules=["gcp(PR=cf-sa30) | () | (shared)"]), "spec.rules[0]", "a dedicated pool falling back to a shared one unasked", "column 22: a fallback from a dedicated pool to a shared one")
cfg_apply("fallback-keb-eu", {"bindingNamespace": PLACEHOLDER_NS, "ruleSyntax": "KEB", "rules": ["aws(PR=cf-eu11) -> EU,PR | EU | -"]}, "spec.rules[0]", "KEB: EU, then EU, then none", "column 31:")
cfg_apply("fallback-keb-shared", {"bindingNamespace": PLACEHOLDER_NS, "ruleSyntax": "KEB", "rules": ["gcp -> - | S"]}, "spec.rules[0]", "KEB: dedicated, then S instead of SF", "column 10:")
cfg_apply("structured-eu", with_(rules=DELETE, structuredRules=[{"plan": "azure", "oneOf": [{"euAccess": "Required"}, {}]}]), "spec.structuredRules[0]", "a structured EU-access preference falling back", "oneOf[1]: preference 2 falls back from an EU-access pool")
cfg_apply("structured-shared", with_(structuredRules=[{"plan": "gcp", "platformRegion": "cf-eu10", "oneOf": [{}, {"shared": True}]}]), "spec.structuredRules[0]", "a structured dedicated preference falling back to shared", "sharedFallback: true")
cfg_apply("structured-message-with-pools", with_(structuredRules=[{"plan": "gcp", "oneOf": [{}], "message": "closed"}]), "spec.structuredRules[0]", "a deny message on an entry that names pools", "only with oneOf: []")
cfg_apply("structured-no-one-of", with_(structuredRules=[{"plan": "gcp"}]), "spec.structuredRules[0].oneOf", "oneOf is required (`[]` denies)", "Required value")
cfg_apply("structured-eu-unknown", with_(structuredRules=[{"plan": "gcp", "oneOf": [{"euAccess": "true"}]}]), "spec.structuredRules[0].oneOf[0].euAccess", "euAccess is Required, FromRequest or Absent", "Unsupported value")
cfg_apply("structured-with-legacy", {"bindingNamespace": PLACEHOLDER_NS, "legacyRules": {"sharedRule": "trial"}, "structuredRules": [{"plan": "gcp", "oneOf": [{}]}]}, "spec", "structuredRules with legacyRules", "structuredRules and legacyRules are mutually exclusive")
cfg_apply("pin-two-tenants", with_(pins=[{"globalAccount": "ga-1", "binding": "cb-1"}, {"globalAccount": "ga-2", "binding": "cb-1"}]), "spec.pins", "one binding pinned to two tenants", "pinned to two global accounts")
cfg_apply("pin-binding-name", with_(pins=[{"globalAccount": "ga-1", "binding": "CB_1"}]), "spec.pins[0].binding", "a binding name that is no object name")

# ----------------------------------------------------------------------------------------------
# 3. HapConfigs the API server accepts and the operator rejects (status).


def cfg_status(slug, spec, why, substring, index=None):
    spec = dict(spec)
    spec.setdefault("bindingNamespace", PLACEHOLDER_NS)
    add("config-status", slug, "HapConfig", hapconfig(IN_FORCE, spec), "status", f"accepted, then RulesValid=False: {why}",
        condition="RulesValid", reason="Invalid", index=index, substring=substring)


cfg_status("label-keys-same", {"rules": ["aws"], "labelKeys": {"dirty": "shared"}}, "two roles share one label key", "shared")
cfg_status("label-keys-tenant-is-type", {"rules": ["aws"], "labelKeys": {"tenantName": "hyperscalerType"}}, "tenantName and hyperscalerType share a key", "hyperscalerType")
cfg_status("required-uncovered", {"rules": ["aws"], "requiredPlans": ["azure"]}, "a required plan has no entry", "`azure`")
cfg_status("required-unknown", {"rules": ["aws"], "requiredPlans": ["azurre"]}, "a required plan that does not exist", "azurre")
cfg_status("legacy-star-right", {"legacyRules": {"euAccessRule": "eu:*"}}, "`*` on the region side", "*")
cfg_status("legacy-star-both", {"legacyRules": {"sharedRule": "*:*"}}, "`*` on both sides", "*:*")
cfg_status("legacy-unknown-plan", {"legacyRules": {"sharedRule": "trail"}}, "a typo of trial", "trail")
cfg_status("legacy-syntax", {"legacyRules": {"platformRegionRule": "gcp:cf-sa30:extra"}}, "two colons", "cf-sa30")
cfg_status("plan-override-bad-rule", {"rules": ["aws", "custom(PR=cf-eu11)"], "plans": {"other": {"providerType": "aws"}}}, "a rule for a plan only an override would add, with a different override", "custom", index=2)
cfg_status("keb-seed-mix", {"ruleSyntax": "KEB", "rules": ["aws(euAccess)"]}, "Seed euAccess attribute in KEB syntax", "euAccess", index=1)
cfg_status("eu-regions-invalid", {"rules": ["aws(euAccess=*)"], "euAccessPlatformRegions": ["cf eu11"]}, "a platform region that is no label value", "cf eu11")
cfg_status("duration-nanosecond", {"rules": ["aws"], "internalStateRefreshCycleDuration": "1ns"}, "a refresh every nanosecond would re-list the cluster without pause", "internalStateRefreshCycleDuration")
cfg_status("duration-too-large", {"rules": ["aws"], "internalStateRefreshCycleDuration": "99999999999h"}, "a duration beyond what the operator can wait", "internalStateRefreshCycleDuration")

# Issue 13: what the CRD does not see, the operator reports.
cfg_status("pin-tenant-twice", {"rules": ["aws"], "pins": [{"globalAccount": "ga-1", "binding": "cb-1"}, {"globalAccount": "ga-1", "binding": "cb-2"}]}, "a tenant pinned twice for one pool", "pinned twice")
cfg_status("fallback-eu-tab", {"rules": ["aws", "aws(PR=cf-eu11,\teuAccess) | ()"]}, "an EU-access fallback the CRD does not see (a tab)", "falls back from an EU-access pool", index=2)
cfg_status("fallback-same-pool", {"rules": ["aws", "aws(PR=cf-eu10) | (PR)"]}, "one pool twice in an entry", "same pool as preference 1", index=2)
cfg_status("deny-ties-allow", {"rules": ["aws", "aws deny \"closed\""]}, "a deny with the same conditions as an allow", "same plan and conditions", index=2)
cfg_status("deny-message-open", {"rules": ["aws", "aws(PR=x) deny \"closed"]}, "a deny message without its closing quote", "no closing", index=2)

# ----------------------------------------------------------------------------------------------
# 4. AccountClaims rejected by the API server (apply).

VALID_CLAIM = {"globalAccount": "ga-bad-input", "plan": "aws", "shootName": "shoot-x"}


def claim_apply(slug, spec, field, why, substring=None, name=None, raw=None, setup=None):
    name = name or f"bad-claim-{slug}"[:63]
    body = raw if raw is not None else claim(name, spec)
    add("claim-apply", slug, "AccountClaim", body, "apply", f"rejected by the API server: {why}",
        setup=setup, field=field, substring=substring)


def cl(**kv):
    s = dict(VALID_CLAIM)
    for k, v in kv.items():
        if v is DELETE:
            s.pop(k, None)
        else:
            s[k] = v
    return s


claim_apply("missing-global-account", cl(globalAccount=DELETE), "spec.globalAccount", "globalAccount is required", "Required value")
claim_apply("missing-plan", cl(plan=DELETE), "spec.plan", "plan is required", "Required value")
claim_apply("empty-global-account", cl(globalAccount=""), "spec.globalAccount", "an empty global account")
claim_apply("space-global-account", cl(globalAccount="ga one"), "spec.globalAccount", "a space: not a label value")
claim_apply("unicode-global-account", cl(globalAccount="g\u00e4-1"), "spec.globalAccount", "non-ASCII: not a label value")
claim_apply("emoji-global-account", cl(globalAccount="ga-\U0001f680"), "spec.globalAccount", "an emoji")
claim_apply("long-global-account", cl(globalAccount="g" * 64), "spec.globalAccount", "64 characters: longer than a label value")
claim_apply("huge-global-account", cl(globalAccount="g" * 10000), "spec.globalAccount", "10,000 characters")
claim_apply("dash-global-account", cl(globalAccount="-ga"), "spec.globalAccount", "a label value must start alphanumeric")
claim_apply("dot-end-global-account", cl(globalAccount="ga."), "spec.globalAccount", "a label value must end alphanumeric")
claim_apply("slash-global-account", cl(globalAccount="ga/1"), "spec.globalAccount", "a slash")
claim_apply("shell-global-account", cl(globalAccount="$(rm -rf /)"), "spec.globalAccount", "shell text")
claim_apply("selector-global-account", cl(globalAccount="ga,tenantName=other"), "spec.globalAccount", "label-selector injection")
claim_apply("newline-global-account", cl(globalAccount="ga\nx"), "spec.globalAccount", "a newline")
claim_apply("number-global-account", cl(globalAccount=123), "spec.globalAccount", "a number", "must be of type string")
claim_apply("list-global-account", cl(globalAccount=["ga"]), "spec.globalAccount", "a list", "must be of type string")
claim_apply("bool-global-account", cl(globalAccount=True), "spec.globalAccount", "a boolean", "must be of type string")
claim_apply("null-global-account", cl(globalAccount=None), "spec.globalAccount", "null")
claim_apply("uppercase-plan", cl(plan="AWS"), "spec.plan", "plans are lowercase")
claim_apply("space-plan", cl(plan="aws eu"), "spec.plan", "a space in a plan")
claim_apply("cyrillic-plan", cl(plan="\u0430ws"), "spec.plan", "Cyrillic `а`")
claim_apply("long-plan", cl(plan="p" * 64), "spec.plan", "64 characters")
claim_apply("empty-plan", cl(plan=""), "spec.plan", "an empty plan")
claim_apply("dash-plan", cl(plan="-aws"), "spec.plan", "a plan must start alphanumeric")
claim_apply("number-plan", cl(plan=5), "spec.plan", "a number", "must be of type string")
claim_apply("rule-as-plan", cl(plan="aws(PR=cf-eu11)"), "spec.plan", "a rule entry as the plan")
claim_apply("space-platform-region", cl(platformRegion="cf eu11"), "spec.platformRegion", "a space in a region")
claim_apply("star-platform-region", cl(platformRegion="*"), "spec.platformRegion", "a wildcard as the request's region")
claim_apply("empty-platform-region", cl(platformRegion=""), "spec.platformRegion", "an empty region")
claim_apply("long-platform-region", cl(platformRegion="r" * 64), "spec.platformRegion", "64 characters")
claim_apply("unicode-cluster-region", cl(clusterRegion="eu\u2013de\u20131"), "spec.clusterRegion", "en dashes")
claim_apply("injection-cluster-region", cl(clusterRegion="eu-de-1,shared=true"), "spec.clusterRegion", "label-selector injection")
claim_apply("list-cluster-region", cl(clusterRegion=["eu-de-1"]), "spec.clusterRegion", "a list", "must be of type string")
claim_apply("uppercase-provider", cl(plan="trial", provider="AWS"), "spec.provider", "provider types are lowercase")
claim_apply("underscore-provider", cl(plan="trial", provider="aws_eu"), "spec.provider", "no underscore in a provider type")
claim_apply("long-provider", cl(plan="trial", provider="p" * 33), "spec.provider", "33 characters (at most 32)")
claim_apply("empty-provider", cl(plan="trial", provider=""), "spec.provider", "an empty provider")
claim_apply("uppercase-shoot", cl(shootName="Shoot-1"), "spec.shootName", "Shoot names are DNS labels")
claim_apply("dot-shoot", cl(shootName="shoot.one"), "spec.shootName", "a dot in a DNS label")
claim_apply("long-shoot", cl(shootName="s" * 64), "spec.shootName", "64 characters")
claim_apply("long-subaccount", cl(subaccount="s" * 254), "spec.subaccount", "254 characters (at most 253)", "Too long")
claim_apply("huge-subaccount", cl(subaccount="s" * 5000), "spec.subaccount", "5,000 characters", "Too long")
claim_apply("number-subaccount", cl(subaccount=7), "spec.subaccount", "a number", "must be of type string")
claim_apply("unknown-field", cl(region="eu"), "spec.region", "a field that does not exist", "unknown field")
claim_apply("unknown-field-case", cl(GlobalAccount="ga"), "spec.GlobalAccount", "field names are case-sensitive", "unknown field")
claim_apply("missing-spec", None, "spec", "no spec at all", "Required value",
            raw={"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "metadata": {"name": "bad-claim-missing-spec"}})
claim_apply("spec-list", None, "spec", "spec is a list", "must be of type object",
            raw={"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "metadata": {"name": "bad-claim-spec-list"}, "spec": ["aws"]})
claim_apply("bad-name", VALID_CLAIM, "metadata.name", "an object name with uppercase", name="Claim-ONE")
claim_apply("bad-label-value", None, "metadata.labels", "a label value with a space",
            raw={"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "metadata": {"name": "bad-claim-label-value", "labels": {"team": "a b"}}, "spec": VALID_CLAIM})
claim_apply("bad-label-key", None, "metadata.labels", "a label key with two slashes",
            raw={"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "metadata": {"name": "bad-claim-label-key", "labels": {"a/b/c": "x"}}, "spec": VALID_CLAIM})

# Immutable spec: a valid claim is created first (setup), then edited.
for slug, edit, why in [
    ("edit-plan", {"plan": "gcp"}, "changing the plan"),
    ("edit-global-account", {"globalAccount": "ga-other"}, "changing the tenant"),
    ("edit-add-shoot", {"shootName": "shoot-added"}, "adding a shoot name"),
    ("edit-remove-shoot", {"shootName": DELETE}, "removing the shoot name"),
    ("edit-platform-region", {"platformRegion": "cf-eu11"}, "adding a platform region"),
    ("edit-subaccount", {"subaccount": "sa-2"}, "changing the subaccount"),
]:
    name = f"bad-claim-{slug}"
    base = {"globalAccount": f"ga-{slug}", "plan": "aws", "shootName": f"shoot-{slug}"}
    if slug == "edit-add-shoot":
        base.pop("shootName")
    if slug == "edit-subaccount":
        base["subaccount"] = "sa-1"
    edited = dict(base)
    for k, v in edit.items():
        if v is DELETE:
            edited.pop(k, None)
        else:
            edited[k] = v
    claim_apply(slug, edited, "spec", f"spec is immutable: {why}", "spec is immutable", name=name,
                setup=claim(name, base))

# ----------------------------------------------------------------------------------------------
# 5. AccountClaims the API server accepts and the operator refuses (status). The test's config:
#    rules aws, gcp, gcp(PR=cf-sa30), trial(shared), free(shared), azure(PR=cf-eu10),
#    sap-converged-cloud(CR=*, shared); no gcp bindings exist and no shared `ibm` binding.


def claim_status(slug, spec, reason, why, substring=None):
    spec = dict(spec)
    spec.setdefault("globalAccount", f"ga-{slug}"[:63])
    add("claim-status", slug, "AccountClaim", claim(f"bad-claim-{slug}"[:63], spec), "status",
        f"accepted, then Ready reason {reason}: {why}", reason=reason, substring=substring)


claim_status("plan-without-rule", {"plan": "azure_lite"}, "NoMatchingRule", "a known plan without a rule", "azure_lite")
claim_status("plan-without-rule-alicloud", {"plan": "alicloud", "platformRegion": "cf-cn40"}, "NoMatchingRule", "alicloud has no rule", "alicloud")
claim_status("region-without-rule", {"plan": "azure", "platformRegion": "cf-us10"}, "NoMatchingRule", "azure only has a rule for cf-eu10", "cf-us10")
claim_status("azure-no-region", {"plan": "azure"}, "NoMatchingRule", "azure only has a rule for cf-eu10, the request names no region", "no platform region")
claim_status("scc-without-cr", {"plan": "sap-converged-cloud"}, "NoMatchingRule", "the rule needs a cluster region", "sap-converged-cloud")
claim_status("preview", {"plan": "preview"}, "NoMatchingRule", "preview has no rule", "preview")
claim_status("unknown-plan", {"plan": "foo-bar"}, "UnknownPlan", "a plan nobody knows", "foo-bar")
claim_status("unknown-plan-provider", {"plan": "openstack"}, "UnknownPlan", "a provider type as the plan", "openstack")
claim_status("unknown-plan-typo", {"plan": "azurre"}, "UnknownPlan", "a typo", "azurre")
claim_status("unknown-plan-digits", {"plan": "0"}, "UnknownPlan", "a digit", "`0`")
claim_status("unknown-plan-underscore", {"plan": "aws_lite"}, "UnknownPlan", "aws_lite does not exist", "aws_lite")
claim_status("trial-no-provider", {"plan": "trial"}, "MissingProvider", "trial takes its provider from the request", "trial")
claim_status("free-no-provider", {"plan": "free", "platformRegion": "cf-eu10"}, "MissingProvider", "free takes its provider from the request", "free")
claim_status("scc-region-too-long", {"plan": "sap-converged-cloud", "clusterRegion": "c" * 63}, "ConfigInvalid", "the region makes hyperscalerType longer than a label value", "at most 63")
claim_status("trial-unknown-provider", {"plan": "trial", "provider": "ibm"}, "PoolExhausted", "no shared binding for a provider nobody offers", "hyperscalerType=ibm")
claim_status("gcp-empty-pool", {"plan": "gcp", "platformRegion": "cf-sa30"}, "PoolExhausted", "the pool has no binding at all", "hyperscalerType=gcp_cf-sa30")

# ----------------------------------------------------------------------------------------------


def write():
    for d in ["rules", "config-apply", "config-status", "claim-apply", "claim-status"]:
        shutil.rmtree(os.path.join(HERE, d), ignore_errors=True)
    for c in CASES:
        case = c["case"]
        path = os.path.join(HERE, case["file"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        exp = {k: v for k, v in case.items() if k not in ("id", "file", "kind")}
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"# {case['id']}: {c['header']}\n")
            f.write(f"# expect: {json.dumps(exp, ensure_ascii=True)}\n")
            f.write("\n".join(c["text"]) + "\n")
        if "setup" in c:
            sp, text = c["setup"]
            spath = os.path.join(HERE, sp)
            os.makedirs(os.path.dirname(spath), exist_ok=True)
            with open(spath, "w", encoding="utf-8") as f:
                f.write(f"# setup of {case['id']}: a valid claim, created before the edit\n")
                f.write("\n".join(text) + "\n")
    with open(os.path.join(HERE, "cases.yaml"), "w", encoding="utf-8") as f:
        f.write("# Index of the bad-input corpus: generated by generate.py (see its docstring for the\n")
        f.write("# format); read by tests/e2e_bad_input.rs. Do not edit by hand.\n")
        f.write("cases:\n")
        for c in CASES:
            lines = emit([c["case"]], 0)
            f.write("\n".join(lines) + "\n")
    counts = {}
    for c in CASES:
        counts[c["group"]] = counts.get(c["group"], 0) + 1
    print(f"{len(CASES)} cases: {counts}")


def check(hap):
    """Runs `hap validate` on every status-time HapConfig; prints disagreements."""
    bad = 0
    for c in CASES:
        case = c["case"]
        if case["kind"] != "HapConfig" or case["expect"] != "status":
            continue
        out = subprocess.run([hap, "validate", "-o", "json", "-f", os.path.join(HERE, case["file"])],
                             capture_output=True, text=True)
        try:
            res = json.loads(out.stdout)
        except ValueError:
            print(f"{case['id']}: no JSON: {out.stdout} {out.stderr}")
            bad += 1
            continue
        texts = []
        for e in res.get("errors", []):
            prefix = ""
            if e.get("index") is not None:
                prefix = f"rule {e['index']} `{e.get('entry')}`: "
            if e.get("column") is not None:
                prefix += f"column {e['column']}: "
            texts.append(prefix + e["message"])
        whole = "\n".join(texts)
        ok = not res.get("valid", True)
        if case.get("index") is not None:
            ok = ok and f"rule {case['index']} " in whole
        ok = ok and case.get("substring", "") in whole
        if not ok:
            bad += 1
            print(f"{case['id']} ({case['file']}): expected index {case.get('index')} and {case.get('substring')!r}; got valid={res.get('valid')}:\n  " + whole.replace("\n", "\n  "))
    print(f"check: {bad} disagreements")
    return bad


if __name__ == "__main__":
    write()
    if len(sys.argv) > 2 and sys.argv[1] == "--check":
        sys.exit(1 if check(sys.argv[2]) else 0)
