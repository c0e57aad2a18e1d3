-- Argo CD health check for accountpool.io/HapConfig (hap-operator).
-- Install: argocd-cm key `resource.customizations.health.accountpool.io_HapConfig` (docs/gitops.md).
-- It gives the answer Flux's kstatus gives on the same object: Healthy = Current,
-- Degraded = Failed (Stalled=True), Progressing = InProgress or Terminating.
-- Only Lua base functions: Argo CD runs custom checks without the standard libraries.
local function describe(c)
  local reason = c.reason or c.type
  if c.message ~= nil and c.message ~= "" then
    return reason .. ": " .. c.message
  end
  return reason
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  return { status = "Progressing", message = "Pending deletion" }
end
if obj.status == nil then
  return { status = "Progressing", message = "Waiting for hap-operator to report status" }
end
local generation = obj.metadata and obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  return {
    status = "Progressing",
    message = "Waiting for hap-operator to observe generation " .. generation .. " (observed " .. observed .. ")",
  }
end

local conditions = {}
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type ~= nil then
      conditions[c.type] = c
    end
  end
end
local ready = conditions["Ready"]
local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  return { status = "Degraded", message = describe(stalled) }
end
local reconciling = conditions["Reconciling"]
if reconciling ~= nil and reconciling.status == "True" then
  return { status = "Progressing", message = describe(reconciling) }
end
if ready ~= nil and ready.status == "True" then
  return { status = "Healthy", message = describe(ready) }
end
if ready ~= nil then
  return { status = "Progressing", message = describe(ready) }
end
return { status = "Progressing", message = "Waiting for the Ready condition" }
