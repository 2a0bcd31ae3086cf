"""The model: features, preprocessing, the tf_keras network. What a user edits, and only that;
nothing here imports the template (the template's packages set Keras 2 before calling in)."""
