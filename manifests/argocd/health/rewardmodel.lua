-- Argo CD health check for serving.rlhf.dev/RewardModel and RLHFPipeline (whose Ready is every role's).
-- Healthy:     Ready=True and the operator has observed the current generation.
-- Degraded:    the operator or KServe judged the current spec and it failed
--              (the reasons below, or any reason ending in Failed; reward-operator's
--              api/conditions.py DEGRADED_REASONS).
-- Progressing: anything else while the operator and KServe converge.
local degraded = {
  InvalidSpec = true, ApplyFailed = true, NoSupportingRuntime = true, RuntimeNotRecognized = true,
  RuntimeDisabled = true, InvalidPredictorSpec = true, ModelLoadFailed = true, RuntimeUnhealthy = true,
  -- Kubernetes' reasons for a container of the InferenceService's pods (POD_FAILURE_REASONS)
  OOMKilled = true, CrashLoopBackOff = true, Error = true, ContainerCannotRun = true, StartError = true,
  DeadlineExceeded = true, ImagePullBackOff = true, ErrImagePull = true, CreateContainerConfigError = true,
  CreateContainerError = true, InvalidImageName = true, ErrImageNeverPull = true, RunContainerError = true,
  PreStartHookError = true, PostStartHookError = true,
}
local hs = {status = "Progressing", message = "Waiting for reward-operator to reconcile"}
if obj.status == nil then
  return hs
end

local generation = obj.metadata.generation or 0
local observed = obj.status.observedGeneration or 0
local ready = nil
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    end
  end
end

if observed < generation then
  hs.message = "Waiting for reward-operator to observe generation " .. generation .. " (observed " .. observed .. ")"
  return hs
end
if ready == nil then
  return hs
end
-- a condition written for an older spec says nothing about the current one
if ready.observedGeneration ~= nil and ready.observedGeneration < generation then
  hs.message = "Ready condition is from generation " .. ready.observedGeneration
  return hs
end

local detail = (ready.reason or "") .. ": " .. (ready.message or "")
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or "Ready"
  if obj.status.url ~= nil then
    hs.message = "Serving at " .. obj.status.url
  end
elseif ready.status == "False" and ready.reason ~= nil
    and (degraded[ready.reason] or string.match(ready.reason, "Failed$") ~= nil) then
  hs.status = "Degraded"
  hs.message = detail
else
  hs.message = detail
end
return hs
