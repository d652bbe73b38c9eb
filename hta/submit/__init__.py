"""``hta makeflow``: a workflow run with makeflow, its workers autoscaled.

- :mod:`hta.submit.config`: the options' layers (config file, ``HTA_*`` variables, flags);
- :mod:`hta.submit.options`: every option, validated, and the workflow file's checks;
- :mod:`hta.submit.reload`: what SIGHUP reads again and changes while the run goes;
- :mod:`hta.submit.run_dir`: the run's folder, its lock and numbered scaling logs;
- :mod:`hta.submit.run`: the run itself (:func:`~hta.submit.run.run_makeflow`);
- :mod:`hta.submit.failure_watch`: what ends a run that cannot end well by itself;
- :mod:`hta.submit.view`: the status server and the live view.
"""
