-- description: Critical decode batch: datasheet roofline B* vs the fitted one (B* x MFU / MBU) and the largest batch seen, per deployment (cost_models)
SELECT
    gpu,
    model,
    gpu_count,
    weight_dtype,
    max_num_seqs,
    critical_batch_roofline AS predicted_critical_batch,
    critical_batch_fitted AS measured_critical_batch,
    critical_batch_fitted / nullif(critical_batch_roofline, 0) AS measured_over_predicted,
    max_batch_seen,
    CASE
        WHEN max_batch_seen IS NULL THEN NULL
        WHEN max_batch_seen >= critical_batch_fitted THEN 'reached'
        ELSE 'below'
    END AS decode_regime
FROM cost_models
WHERE phase = 'decode'
ORDER BY gpu, model, gpu_count, weight_dtype, max_num_seqs
