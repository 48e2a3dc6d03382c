// The microphone picker's choices. No DOM here.

export interface DeviceChoice {
  readonly id: string;
  readonly label: string;
}

/**
 * Audio inputs as the picker lists them. Browsers hide labels until the microphone is allowed,
 * so unnamed devices get a number; the "default" and "communications" aliases that Chrome adds
 * for devices already in the list are kept (they follow the system's choice).
 */
export function microphoneChoices(
  devices: readonly { deviceId: string; label: string; kind: string }[],
): DeviceChoice[] {
  const inputs = devices.filter((d) => d.kind === 'audioinput' && d.deviceId);
  return inputs.map((d, i) => ({ id: d.deviceId, label: d.label || `Microphone ${i + 1}` }));
}
