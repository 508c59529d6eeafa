//! `explain servicecidr/NAME`: which IPAddresses hold the range (those it
//! is the only range of, with the Service each belongs to), read live.

use futures::FutureExt;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use protection_core::explain::{ExplainError, ExplainKind, Explained, Hold, NameRule, failed, get};

use crate::cidr::{ALLOCATOR, LABEL_MANAGED_BY};
use crate::controller::{NAME, users};
use crate::index::{cidrs_of, managed};

/// The kind service-cidr-protection explains.
pub const KIND: ExplainKind = ExplainKind {
    controller: NAME,
    group: "networking.k8s.io",
    title: "ServiceCIDR",
    names: &["servicecidr", "servicecidrs"],
    namespaced: false,
    name_rule: NameRule::Dns1123Subdomain,
    explain: |client, _, name| explain(client, name).boxed(),
    explain_many: Some(|client, names| {
        explain_many(client, names.into_iter().map(|(_, n)| n).collect()).boxed()
    }),
};

/// `services/ns/name` of an IPAddress's parentRef.
fn parent(ip: &IPAddress) -> Option<String> {
    let p = &ip.spec.as_ref()?.parent_ref;
    Some(format!(
        "{} {}/{}",
        p.resource,
        p.namespace.as_deref().unwrap_or_default(),
        p.name
    ))
}

/// Every ServiceCIDR and every allocator-managed IPAddress, listed live.
async fn list_all(
    client: &kube::Client,
) -> Result<(Vec<ServiceCIDR>, Vec<IPAddress>), ExplainError> {
    let all = Api::<ServiceCIDR>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(failed("listing servicecidrs"))?;
    let ips = Api::<IPAddress>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={ALLOCATOR}")))
        .await
        .map_err(failed("listing ipaddresses"))?;
    Ok((all.items, ips.items))
}

/// Explains ServiceCIDR `name`.
pub async fn explain(
    client: kube::Client,
    name: String,
) -> Result<Option<Explained>, ExplainError> {
    let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
    let Some(obj) = get(&cidrs, &name, format!("reading servicecidr {name}")).await? else {
        return Ok(None);
    };
    let (all, ips) = list_all(&client).await?;
    Ok(Some(explained(obj, &all, &ips)))
}

/// Explains the ServiceCIDRs `names` from one live list of the ranges and
/// one of the addresses (`None` for a range that does not exist).
pub async fn explain_many(
    client: kube::Client,
    names: Vec<String>,
) -> Result<Vec<Option<Explained>>, ExplainError> {
    let (all, ips) = list_all(&client).await?;
    Ok(names
        .iter()
        .map(|name| {
            all.iter()
                .find(|s| s.name_any() == *name)
                .map(|obj| explained(obj.clone(), &all, &ips))
        })
        .collect())
}

/// What holds `obj`, of the ranges `all` and the managed addresses `ips`.
fn explained(obj: ServiceCIDR, all: &[ServiceCIDR], ips: &[IPAddress]) -> Explained {
    let name = obj.name_any();
    let others: Vec<(String, Vec<String>)> = all
        .iter()
        .filter(|s| s.name_any() != name)
        .map(|s| (s.name_any(), cidrs_of(s)))
        .collect();
    let managed_ips: Vec<_> = ips.iter().filter_map(managed).collect();
    let holding = users(
        &obj,
        others
            .iter()
            .map(|(n, c)| (n.as_str(), c.as_slice()))
            .collect(),
        &managed_ips,
    );
    let mut facts = vec![format!("CIDRs:       {}", cidrs_of(&obj).join(", "))];
    if let Some(c) = obj
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
    {
        let reason = if c.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", c.reason)
        };
        facts.push(format!("Ready:       {}{reason}: {}", c.status, c.message));
    }
    let mut held = Vec::new();
    if !holding.is_empty() {
        let who: Vec<String> = holding
            .iter()
            .map(|u| {
                let owner = ips
                    .iter()
                    .find(|i| i.name_any() == u.name)
                    .and_then(parent)
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default();
                format!("IPAddress {}{owner}", u.name)
            })
            .collect();
        held.push(Hold::said(
            NAME,
            &format!(
                "the range is the only one of {}. It goes once those Services are deleted (or given addresses elsewhere), or another ServiceCIDR contains its CIDRs; then 10 s after the deletion.",
                who.join(", ")
            ),
        ));
    }
    Explained {
        meta: obj.metadata,
        facts,
        held,
    }
}
