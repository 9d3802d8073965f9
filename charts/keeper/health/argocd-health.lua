-- Argo CD health check for keeper's kinds: keeper.dev/v1alpha1 S3Tenant, S3Bucket and CloudDatabase.
-- One script serves the three: they share one status contract (phase, observedGeneration and the
-- conditions Ready, Synced, Reconciling, Stalled, DeletionBlocked). argocd-cm.yaml beside this file
-- embeds it once per kind; charts/keeper/ci/check-health.py checks that the copies equal this file
-- and runs it on the samples in charts/keeper/ci/health-samples/ (make chart).
--
-- Argo CD runs scripts from argocd-cm with gopher-lua (Lua 5.1) and opens only the base, table and
-- a reduced os library: there is no string library (no string.format, no ("x"):sub()), so this
-- script only concatenates with `..` and converts with tostring/tonumber.
--
-- Note: Argo CD answers "Progressing: Pending deletion" itself for any object with a
-- deletionTimestamp and does not call this script then; the DeletionBlocked rule below serves
-- other callers of the script (argocd admin settings resource-overrides health, tests).
local hs = {}

local function findCondition(conditions, wanted)
  if type(conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(conditions) do
    if type(c) == "table" and c.type == wanted then
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local function isFalse(c)
  return c ~= nil and c.status == "False"
end

local function present(s)
  return s ~= nil and s ~= ""
end

-- "Reason: message", or whichever of the two is set; nil when neither is.
local function describe(c)
  if c == nil then
    return nil
  end
  if present(c.reason) and present(c.message) then
    return tostring(c.reason) .. ": " .. tostring(c.message)
  end
  if present(c.message) then
    return tostring(c.message)
  end
  if present(c.reason) then
    return tostring(c.reason)
  end
  return nil
end

local metadata = obj.metadata or {}
local status = obj.status

-- Nothing written yet: keeper has not looked at the object (or is not running).
if type(status) ~= "table" or next(status) == nil then
  hs.status = "Progressing"
  hs.message = "waiting for keeper: no status yet"
  return hs
end

local phase = status.phase
local conditions = status.conditions
local ready = findCondition(conditions, "Ready")
local synced = findCondition(conditions, "Synced")
local reconciling = findCondition(conditions, "Reconciling")
local stalled = findCondition(conditions, "Stalled")
local blocked = findCondition(conditions, "DeletionBlocked")

-- A status about an older spec says nothing about the current one (kstatus does the same, and
-- skips the check when observedGeneration is absent).
local generation = tonumber(metadata.generation)
local observed = tonumber(status.observedGeneration)
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.status = "Progressing"
  hs.message = "waiting for keeper to observe generation " .. tostring(generation)
    .. " (last observed: " .. tostring(observed) .. ")"
  return hs
end

-- A failure a retry cannot fix: it needs a change from a user.
if isTrue(stalled) or phase == "Failed" then
  hs.status = "Degraded"
  hs.message = (isTrue(stalled) and describe(stalled))
    or (not isTrue(ready) and describe(ready))
    or describe(synced)
    or ("phase " .. tostring(phase))
  return hs
end

-- keeper's finalizer refuses the deletion on purpose: a human has to decide.
if isTrue(blocked) then
  hs.status = "Degraded"
  hs.message = "deletion blocked: " .. (describe(blocked) or "see the DeletionBlocked condition")
  return hs
end

if isTrue(ready) then
  hs.status = "Healthy"
  hs.message = describe(ready) or "Ready"
  -- A drain (S3Bucket phase Draining) keeps the bucket usable and Ready: Healthy, with the drain's
  -- progress in the message.
  if phase == "Draining" then
    local drain = status.drainStatus
    if type(drain) == "table" and present(drain.message) then
      hs.message = hs.message .. " (" .. tostring(drain.message) .. ")"
    end
  end
  return hs
end

-- Waiting, or retrying a failing reconcile: keeper is on it.
hs.status = "Progressing"
if isFalse(synced) and describe(synced) ~= nil then
  hs.message = "retrying: " .. describe(synced)
elseif describe(ready) ~= nil then
  hs.message = describe(ready)
elseif isTrue(reconciling) and describe(reconciling) ~= nil then
  hs.message = describe(reconciling)
else
  hs.message = "waiting for keeper (phase " .. tostring(phase or "not set") .. ")"
end
return hs
