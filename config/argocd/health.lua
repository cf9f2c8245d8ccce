-- Argo CD health of an ApplySet or ClusterApplySet (applyset.dev), for
-- resource.customizations.health in argocd-cm. Reads the status the applyset-operator
-- writes: the Ready condition and the generation it describes.
--   Healthy      Ready=True for the current generation (the set is applied and pruned;
--                in Plan mode, the plan is ready), and, for sets that wait or have
--                health checks, Healthy=True (kept current between reconciles)
--   Suspended    spec.suspend (Ready=False, reason Suspended)
--   Degraded     Ready=False for the current generation: validation, sources, apply,
--                prune, conflicts (the message says which; the operator retries the
--                transient ones)
--                or Healthy=False (a member failed since: the message names it)
--   Progressing  no status yet, or a status of an older generation, or a reconcile running,
--                or a set waiting for its members' health (Ready or Healthy Unknown)
local hs = {}

local function find(conditions, type)
  for _, c in ipairs(conditions or {}) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local status = obj.status
local ready = status and find(status.conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the applyset-operator to reconcile the set"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
local observed = ready.observedGeneration or status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the applyset-operator to reconcile generation " .. tostring(generation)
  return hs
end

local message = ready.message or ""
local healthy = find(status.conditions, "Healthy")
if ready.reason == "Suspended" then
  hs.status = "Suspended"
elseif ready.status == "True" and healthy ~= nil and healthy.status == "False" then
  hs.status = "Degraded"
  message = (healthy.reason or "Unhealthy") .. ": " .. (healthy.message or "")
elseif ready.status == "True" and healthy ~= nil and healthy.status ~= "True" then
  hs.status = "Progressing"
  message = healthy.message or ""
elseif ready.status == "True" then
  hs.status = "Healthy"
elseif ready.status == "Unknown" or ready.reason == "Progressing" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
  if ready.reason ~= nil then
    message = ready.reason .. ": " .. message
  end
end
hs.message = message
return hs
