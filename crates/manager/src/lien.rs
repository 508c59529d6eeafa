//! `protection-manager lien add|remove|list`: liens (KEP-2839, without an
//! API change). A lien is one `{holder, reason}` entry of the JSON list in
//! an object's `protection-manager.io/liens` annotation; the chart's
//! ValidatingAdmissionPolicy refuses the object's DELETE while the list is
//! not empty, in kube-apiserver, whether or not the manager runs.
//!
//! Every change is one guarded JSON patch: `test` the annotation's value
//! read (or, when it is absent, the object's resourceVersion), then write
//! the new list; a test that fails (another holder wrote meanwhile) reads
//! again and retries, so two holders never lose each other's entry.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ObjectMeta;
use serde_json::{Value, json};

use crate::cli::{LienAddArgs, LienListArgs, LienRemoveArgs, LienTarget};

/// The annotation that holds the liens.
pub const ANNOTATION: &str = "protection-manager.io/liens";
/// The label of the chart's lien policy.
pub const POLICY_LABEL: &str = "protection-manager.io/policy=liens";
/// The field manager of lien patches.
const FIELD_MANAGER: &str = "protection-manager-lien";
/// How often a guarded patch is retried after losing a race.
const ATTEMPTS: usize = 32;

/// One lien.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lien {
    pub holder: String,
    pub reason: String,
}

/// Parses the annotation's value ("" or only whitespace: no liens). The
/// error names what is wrong, so a hand-edited value is never overwritten
/// blindly.
pub fn parse(value: &str) -> Result<Vec<Lien>, String> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: Value = serde_json::from_str(value).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Array(items) = v else {
        return Err("not a JSON list of {holder, reason}".into());
    };
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let field = |k: &str| {
                it.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| format!("entry {i} has no string {k:?}"))
            };
            Ok(Lien {
                holder: field("holder")?,
                reason: field("reason")?,
            })
        })
        .collect()
}

/// The annotation's value for `liens`: compact JSON, `holder` before
/// `reason` (the form the chart's policy turns into `holder (reason)`).
pub fn render(liens: &[Lien]) -> String {
    let list: Vec<Value> = liens
        .iter()
        .map(|l| json!({"holder": l.holder, "reason": l.reason}))
        .collect();
    Value::Array(list).to_string()
}

/// `holder`: what names who holds a lien (a team, a tool, a ticket).
pub fn check_holder(holder: &str) -> Result<(), String> {
    if holder.is_empty() || holder.len() > 128 {
        return Err(format!("--holder {holder:?}: must be 1 to 128 characters"));
    }
    if let Some(c) = holder
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:/@".contains(*c)))
    {
        return Err(format!(
            "--holder {holder:?}: {c:?} is not allowed (letters, digits and - _ . : / @ are)"
        ));
    }
    Ok(())
}

/// `reason`: one line of text (the refusal is one line).
pub fn check_reason(reason: &str) -> Result<(), String> {
    let r = reason.trim();
    if r.is_empty() || r.len() > 512 {
        return Err(format!("--reason {reason:?}: must be 1 to 512 characters"));
    }
    if r.chars().any(char::is_control) {
        return Err(format!(
            "--reason {reason:?}: must be one line without control characters"
        ));
    }
    Ok(())
}

/// `liens` with `holder`'s entry set to `reason` (added at the end, or its
/// reason replaced); `None` if nothing changes.
pub fn with_lien(liens: &[Lien], holder: &str, reason: &str) -> Option<Vec<Lien>> {
    let mut out = liens.to_vec();
    match out.iter_mut().find(|l| l.holder == holder) {
        Some(l) if l.reason == reason => return None,
        Some(l) => l.reason = reason.to_string(),
        None => out.push(Lien {
            holder: holder.to_string(),
            reason: reason.to_string(),
        }),
    }
    Some(out)
}

/// `liens` without `holder`'s entries; `None` if it has none.
pub fn without_lien(liens: &[Lien], holder: &str) -> Option<Vec<Lien>> {
    let out: Vec<Lien> = liens
        .iter()
        .filter(|l| l.holder != holder)
        .cloned()
        .collect();
    (out.len() != liens.len()).then_some(out)
}

fn escaped_path() -> String {
    format!(
        "/metadata/annotations/{}",
        ANNOTATION.replace('~', "~0").replace('/', "~1")
    )
}

/// The guarded JSON patch from what was read (`meta`) to `next`.
pub fn guarded_patch(meta: &ObjectMeta, next: &[Lien]) -> Value {
    let path = escaped_path();
    let current = meta.annotations.as_ref().and_then(|a| a.get(ANNOTATION));
    let mut ops = Vec::new();
    match current {
        Some(v) => {
            ops.push(json!({"op": "test", "path": path, "value": v}));
            if next.is_empty() {
                ops.push(json!({"op": "remove", "path": path}));
            } else {
                ops.push(json!({"op": "replace", "path": path, "value": render(next)}));
            }
        }
        None => {
            // JSON patch cannot test for absence: the resourceVersion read
            // stands for "nobody wrote since".
            ops.push(json!({
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": meta.resource_version.clone().unwrap_or_default(),
            }));
            if meta.annotations.is_none() {
                ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
            }
            ops.push(json!({"op": "add", "path": path, "value": render(next)}));
        }
    }
    Value::Array(ops)
}

/// What `kind/name` resolved to.
pub struct Resolved {
    pub ar: ApiResource,
    pub namespaced: bool,
}

impl Resolved {
    fn display(&self) -> String {
        if self.ar.group.is_empty() {
            self.ar.plural.clone()
        } else {
            format!("{}.{}", self.ar.plural, self.ar.group)
        }
    }
}

/// Resolves a kubectl-style kind (`secret`, `secrets`, `cm`,
/// `deployments.apps`, `Deployment`) with the server's discovery: the core
/// group first, then the other groups in discovery order.
pub async fn resolve(client: &kube::Client, kind: &str) -> Result<Resolved> {
    let wanted = kind.to_ascii_lowercase();
    let (name, group) = match wanted.split_once('.') {
        Some((n, g)) => (n.to_string(), Some(g.to_string())),
        None => (wanted.clone(), None),
    };
    let mut lists = Vec::new();
    if group.as_deref().is_none_or(str::is_empty) {
        let core = client
            .list_core_api_resources("v1")
            .await
            .context("discovering the core API group")?;
        lists.push((String::new(), "v1".to_string(), core));
    }
    if group.as_deref() != Some("") {
        let groups = client
            .list_api_groups()
            .await
            .context("discovering the API groups")?;
        for g in groups.groups {
            if group.as_deref().is_some_and(|w| w != g.name) {
                continue;
            }
            let Some(pv) = g.preferred_version.or_else(|| g.versions.first().cloned()) else {
                continue;
            };
            let list = client
                .list_api_group_resources(&pv.group_version)
                .await
                .with_context(|| format!("discovering {}", pv.group_version))?;
            lists.push((g.name.clone(), pv.version.clone(), list));
        }
    }
    for (g, v, list) in lists {
        for r in list.resources {
            if r.name.contains('/') {
                continue;
            }
            let hit = r.name == name
                || r.singular_name == name
                || r.kind.to_ascii_lowercase() == name
                || r.short_names.iter().flatten().any(|s| *s == name);
            if hit {
                let api_version = if g.is_empty() {
                    v.clone()
                } else {
                    format!("{g}/{v}")
                };
                return Ok(Resolved {
                    ar: ApiResource {
                        group: g.clone(),
                        version: v.clone(),
                        api_version,
                        kind: r.kind.clone(),
                        plural: r.name.clone(),
                    },
                    namespaced: r.namespaced,
                });
            }
        }
    }
    bail!(
        "the server doesn't have a resource type {kind:?} (a kind as kubectl names it: secrets, cm, deployments.apps)"
    )
}

/// Splits `KIND/NAME` (the name may be absent for `list`).
pub fn split_target(target: &str) -> Result<(&str, Option<&str>)> {
    match target.split_once('/') {
        Some((k, n)) if !k.is_empty() && !n.is_empty() && !n.contains('/') => Ok((k, Some(n))),
        None if !target.is_empty() => Ok((target, None)),
        _ => bail!("expected KIND/NAME (e.g. secrets/db or pvc/data), got {target:?}"),
    }
}

fn object_api(client: &kube::Client, r: &Resolved, t: &LienTarget) -> Api<DynamicObject> {
    if r.namespaced {
        Api::namespaced_with(client.clone(), t.namespace(), &r.ar)
    } else {
        Api::all_with(client.clone(), &r.ar)
    }
}

fn object_name(r: &Resolved, t: &LienTarget, name: &str) -> String {
    if r.namespaced {
        format!("{}/{name} in namespace {}", r.display(), t.namespace())
    } else {
        format!("{}/{name}", r.display())
    }
}

fn summary(liens: &[Lien]) -> String {
    if liens.is_empty() {
        "none".into()
    } else {
        liens
            .iter()
            .map(|l| format!("{} ({})", l.holder, l.reason))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Reads the object, applies `change` to its liens and writes them with a
/// guarded patch, retrying when another writer won the race. Returns the
/// liens before and after (equal when `change` changed nothing).
async fn edit(
    api: &Api<DynamicObject>,
    what: &str,
    name: &str,
    change: impl Fn(&[Lien]) -> Option<Vec<Lien>>,
) -> Result<(Vec<Lien>, Vec<Lien>)> {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        let meta = api
            .get_metadata(name)
            .await
            .with_context(|| format!("reading {what}"))?
            .metadata;
        let raw = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let before = parse(&raw).map_err(|e| {
            anyhow::anyhow!(
                "{what}: annotation {ANNOTATION} is {e}: {raw:?}; fix or remove it with kubectl annotate first"
            )
        })?;
        let Some(after) = change(&before) else {
            return Ok((before.clone(), before));
        };
        let patch = guarded_patch(&meta, &after);
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let json_patch: json_patch::Patch =
            serde_json::from_value(patch).context("building the guarded patch")?;
        match api.patch(name, &pp, &Patch::<()>::Json(json_patch)).await {
            Ok(_) => return Ok((before, after)),
            // A failed `test` (422) or a conflict: someone wrote meanwhile.
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {
                last = s.message;
                let jitter =
                    u64::from(uuid::Uuid::new_v4().as_bytes()[0]) % (10 * (attempt as u64 + 1));
                tokio::time::sleep(Duration::from_millis(jitter)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("patching {what}")),
        }
    }
    bail!(
        "{what}: gave up after {ATTEMPTS} attempts, each lost a race with another writer (last: {last})"
    )
}

/// Whether the chart's lien policy covers the kind; a note to print if not
/// (or if it cannot tell).
async fn policy_note(client: &kube::Client, r: &Resolved) -> Option<String> {
    let ar = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingAdmissionPolicy".into(),
        plural: "validatingadmissionpolicies".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let list = match api.list(&ListParams::default().labels(POLICY_LABEL)).await {
        Ok(l) => l.items,
        Err(e) => {
            return Some(format!(
                "note: could not check that a lien policy covers {} ({e})",
                r.display()
            ));
        }
    };
    let covers = |rule: &Value| {
        let has = |key: &str, want: &str| {
            rule.get(key)
                .and_then(Value::as_array)
                .is_some_and(|l| l.iter().any(|v| v == "*" || v == want))
        };
        has("apiGroups", &r.ar.group)
            && has("resources", &r.ar.plural)
            && has("operations", "DELETE")
    };
    let covered = list.iter().any(|p| {
        p.data
            .pointer("/spec/matchConstraints/resourceRules")
            .and_then(Value::as_array)
            .is_some_and(|rules| rules.iter().any(covers))
    });
    (!covered).then(|| {
        format!(
            "warning: no lien policy covers {} (a ValidatingAdmissionPolicy labelled {POLICY_LABEL}): this lien does not hold until the chart's liens.resources lists the kind",
            r.display()
        )
    })
}

/// The one object `add` and `remove` act on.
struct Object {
    client: kube::Client,
    resolved: Resolved,
    api: Api<DynamicObject>,
    /// How messages name it.
    what: String,
    name: String,
}

async fn object(t: &LienTarget) -> Result<Object> {
    let (kind, name) = split_target(&t.target)?;
    let Some(name) = name else {
        bail!("expected KIND/NAME, e.g. secrets/db; got {:?}", t.target);
    };
    let client = crate::release_check::client(&t.client).await?;
    let resolved = resolve(&client, kind).await?;
    Ok(Object {
        api: object_api(&client, &resolved, t),
        what: object_name(&resolved, t, name),
        name: name.to_string(),
        client,
        resolved,
    })
}

pub async fn add(args: &LienAddArgs) -> Result<String> {
    check_holder(&args.holder).map_err(anyhow::Error::msg)?;
    check_reason(&args.reason).map_err(anyhow::Error::msg)?;
    let reason = args.reason.trim().to_string();
    let Object {
        client,
        resolved: r,
        api,
        what,
        name,
    } = object(&args.target).await?;
    let (before, after) = edit(&api, &what, &name, |l| with_lien(l, &args.holder, &reason)).await?;
    let mut out = String::new();
    if before == after {
        let _ = writeln!(
            out,
            "{what}: {} already holds a lien ({reason})",
            args.holder
        );
    } else {
        let _ = writeln!(out, "{what}: lien of {} added ({reason})", args.holder);
    }
    let _ = writeln!(out, "liens: {}", summary(&after));
    if let Some(note) = policy_note(&client, &r).await {
        let _ = writeln!(out, "{note}");
    }
    Ok(out)
}

pub async fn remove(args: &LienRemoveArgs) -> Result<String> {
    check_holder(&args.holder).map_err(anyhow::Error::msg)?;
    let Object {
        api, what, name, ..
    } = object(&args.target).await?;
    let (before, after) = edit(&api, &what, &name, |l| without_lien(l, &args.holder)).await?;
    let mut out = String::new();
    if before == after {
        let _ = writeln!(out, "{what}: {} holds no lien", args.holder);
    } else {
        let _ = writeln!(out, "{what}: lien of {} removed", args.holder);
    }
    if after.is_empty() {
        let _ = writeln!(out, "liens: none (it may be deleted)");
    } else {
        let _ = writeln!(out, "liens: {}", summary(&after));
    }
    Ok(out)
}

/// `lien list KIND/NAME`, or `lien list KIND` for every object of the kind
/// (in the namespace, or all with `-A`) that has liens.
pub async fn list(args: &LienListArgs) -> Result<String> {
    let (kind, name) = split_target(&args.target.target)?;
    let client = crate::release_check::client(&args.target.client).await?;
    let r = resolve(&client, kind).await?;
    let metas: Vec<ObjectMeta> = match name {
        Some(n) => {
            let api = object_api(&client, &r, &args.target);
            vec![
                api.get_metadata(n)
                    .await
                    .with_context(|| format!("reading {}", object_name(&r, &args.target, n)))?
                    .metadata,
            ]
        }
        None => {
            let api: Api<DynamicObject> = if r.namespaced && !args.all_namespaces {
                Api::namespaced_with(client.clone(), args.target.namespace(), &r.ar)
            } else {
                Api::all_with(client.clone(), &r.ar)
            };
            api.list_metadata(&ListParams::default())
                .await
                .with_context(|| format!("listing {}", r.display()))?
                .items
                .into_iter()
                .map(|o| o.metadata)
                .collect()
        }
    };
    let mut rows = Vec::new();
    for m in &metas {
        let raw = m
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let ns = m.namespace.clone().unwrap_or_default();
        let obj = m.name.clone().unwrap_or_default();
        match parse(&raw) {
            Ok(liens) => {
                for l in liens {
                    rows.push([ns.clone(), obj.clone(), l.holder, l.reason]);
                }
            }
            Err(e) => rows.push([
                ns.clone(),
                obj.clone(),
                "?".into(),
                format!("unreadable {ANNOTATION} ({e}): {raw}"),
            ]),
        }
    }
    if rows.is_empty() {
        return Ok(match name {
            Some(n) => format!("{}: no liens\n", object_name(&r, &args.target, n)),
            None => format!("no {} has liens\n", r.display()),
        });
    }
    let mut header = ["NAMESPACE", "NAME", "HOLDER", "REASON"]
        .map(String::from)
        .to_vec();
    let skip_ns = !r.namespaced;
    if skip_ns {
        header.remove(0);
    }
    let mut table: Vec<Vec<String>> = vec![header];
    for row in rows {
        let mut row = row.to_vec();
        if skip_ns {
            row.remove(0);
        }
        table.push(row);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|c| table.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in table {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == widths.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("   "));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lien(h: &str, r: &str) -> Lien {
        Lien {
            holder: h.into(),
            reason: r.into(),
        }
    }

    #[test]
    fn the_annotation_round_trips_in_the_form_the_policy_reads() {
        let l = vec![
            lien("backup", "nightly snapshot"),
            lien("team-a", "say \"no\""),
        ];
        let text = render(&l);
        assert_eq!(
            text,
            r#"[{"holder":"backup","reason":"nightly snapshot"},{"holder":"team-a","reason":"say \"no\""}]"#
        );
        assert_eq!(parse(&text), Ok(l));
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse(" [ ] "), Ok(vec![]));
        assert!(parse("{}").unwrap_err().contains("not a JSON list"));
        assert!(parse("[{\"holder\":1}]").unwrap_err().contains("entry 0"));
        assert!(parse("nope").unwrap_err().starts_with("not JSON"));
    }

    #[test]
    fn add_sets_one_entry_per_holder_and_remove_drops_it() {
        let l = vec![lien("a", "x")];
        assert_eq!(with_lien(&l, "a", "x"), None);
        assert_eq!(with_lien(&l, "a", "y"), Some(vec![lien("a", "y")]));
        assert_eq!(
            with_lien(&l, "b", "z"),
            Some(vec![lien("a", "x"), lien("b", "z")])
        );
        assert_eq!(without_lien(&l, "b"), None);
        assert_eq!(without_lien(&l, "a"), Some(vec![]));
    }

    #[test]
    fn the_patch_tests_what_it_read() {
        let mut meta = ObjectMeta {
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        };
        assert_eq!(
            guarded_patch(&meta, &[lien("a", "x")]),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/metadata/annotations", "value": {}},
                {"op": "add", "path": "/metadata/annotations/protection-manager.io~1liens", "value": r#"[{"holder":"a","reason":"x"}]"#},
            ])
        );
        meta.annotations = Some([(ANNOTATION.to_string(), "[]".to_string())].into());
        assert_eq!(
            guarded_patch(&meta, &[]),
            json!([
                {"op": "test", "path": "/metadata/annotations/protection-manager.io~1liens", "value": "[]"},
                {"op": "remove", "path": "/metadata/annotations/protection-manager.io~1liens"},
            ])
        );
    }

    #[test]
    fn holders_and_reasons_are_checked() {
        assert!(check_holder("team-a/backup@ci").is_ok());
        assert!(check_holder("").is_err());
        assert!(check_holder("a b").unwrap_err().contains("' '"));
        assert!(check_holder("a\"b").is_err());
        assert!(check_reason("nightly snapshot").is_ok());
        assert!(check_reason("two\nlines").unwrap_err().contains("one line"));
        assert!(check_reason("  ").is_err());
        assert_eq!(
            split_target("secrets/db").ok(),
            Some(("secrets", Some("db")))
        );
        assert_eq!(split_target("secrets").ok(), Some(("secrets", None)));
        assert!(split_target("a/b/c").is_err());
        assert!(split_target("/x").is_err());
    }
}
