from xeoncluster.cli import main

main()
