"""Training tasks beyond the Trainer's node classification, built on the drop-in API
(``dglx train --task``)."""
