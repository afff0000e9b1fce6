"""From every run's figures to the answer: the statistics (statistics), the verdict on fine-tuning (verdict), the
tests between runs and the one recommendation (recommend), prices (costs), GPU sizing (sizing), the data-value
curve's fit (curve) over its points (data_value), and the whole decision the report and the export read (decision).
May import ``core``, ``data`` and ``evaluate``."""
