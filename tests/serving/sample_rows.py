"""A few rows in the training data's CSV layout: real rows of each species, plus missing values
(whole row, one cell, only the text) and an island the model never saw."""

SAMPLE_CSV = """\
species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year
Adelie,Torgersen,39.1,18.7,181,3750,male,2007
Gentoo,Biscoe,46.1,13.2,211,4500,female,2007
Chinstrap,Dream,46.5,17.9,192,3500,female,2007
Gentoo,Biscoe,50,16.3,230,5700,male,2007
Adelie,Torgersen,34.1,18.1,193,3475,NA,2007
Chinstrap,Dream,50,NA,196,3900,male,2007
Adelie,Anvers,37.5,18.9,179,2975,,2007
Adelie,Torgersen,NA,NA,NA,NA,NA,2007
"""
SAMPLE_ROWS = SAMPLE_CSV.count("\n") - 1
